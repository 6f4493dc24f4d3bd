#!/usr/bin/env bash
# test_profile.sh - --profile on the CPU backend: the table, CSV and JSON
# (bytes, FLOPs and source lines of a graph worked out by hand; rows sorted
# by time; shares that add up), the trace (valid JSON in Chrome's trace event
# format: compile phases, host and device tracks, flow events joining them),
# --emit=dot rendered by Graphviz, and the HTML report in headless Chromium
# (no console errors, a screenshot that is not blank, the table's numbers
# equal to the JSON profile's, the sort script sorting).
#
# Skips a part whose tool is missing (SKIP lines): the CPU backend (LLVM),
# cJSON, graphviz's dot, chromium; scripts/setup.sh installs them all.
#   FUSEC=build/fusec SRC=. bash tests/test_profile.sh
set -u
FUSEC=${FUSEC:?set FUSEC to the fusec binary}
SRC=${SRC:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_profile.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }
ir=$SRC/tests/profile/small.ir

if ! "$FUSEC" "$ir" --device=cpu --profile --profile-runs=3 >"$tmp/table" 2>"$tmp/err"; then
  if grep -q "no CPU backend" "$tmp/err"; then echo "SKIP: no CPU backend in this build"; exit 0; fi
  fail "--profile exited $?: $(cat "$tmp/err")"
fi

# The table: a header, one row per launch (3), the summary.
grep -q '^profile of small on CPU' "$tmp/table" || fail "table: no title line"
rows=$(grep -cE '^ +[0-9]+  (fc_g|gemm)' "$tmp/table")
[[ $rows == 3 ]] || fail "table: $rows rows, want 3"
grep -q 'launches: 3 (2 kernels, 1 library calls) for 5 source ops' "$tmp/table" || fail "table: summary's launch count"
# Aligned columns: every row's "median ms" value ends in the header's column.
python3 - "$tmp/table" <<'PY' || fail "table: columns not aligned"
import sys
lines = open(sys.argv[1]).read().splitlines()
head = lines[1]
end = head.index("median ms") + len("median ms")
for l in lines[2:5]:
    assert l[end - 1].isdigit() and l[end] == " ", (l, end)
PY

# CSV: a header and three rows, the hand-counted bytes and FLOPs.
"$FUSEC" "$ir" --device=cpu --profile --profile-format=csv --profile-runs=3 >"$tmp/csv" 2>"$tmp/err" || fail "csv: $(cat "$tmp/err")"
python3 - "$tmp/csv" <<'PY' || fail "csv: contents"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 3, rows
by = {r["source"]: r for r in rows}
# exp, mul: reads x (64x256 f32), writes b: 2 x 65536 bytes, one FLOP per element per op.
assert int(by["small.ir:6-7"]["bytes"]) == 131072 and float(by["small.ir:6-7"]["flops"]) == 32768, by
assert int(by["small.ir:6-7"]["source_ops"]) == 2
# reduce_sum: reads b, writes 64 floats.
assert int(by["small.ir:8"]["bytes"]) == 65536 + 256 and float(by["small.ir:8"]["flops"]) == 16384
# the GEMM: b, w (256x128), the result (64x128); 2 M N K FLOPs.
g = by["small.ir:9-10"]  # the matmul and the relu it took as its epilogue
assert g["kind"] == "library" and int(g["bytes"]) == 65536 + 131072 + 32768 and float(g["flops"]) == 2 * 64 * 128 * 256
ms = [float(r["median_ms"]) for r in rows]
assert ms == sorted(ms, reverse=True), ms
assert abs(sum(float(r["share"]) for r in rows) - 1) < 1e-3
for r in rows:
    assert float(r["min_ms"]) <= float(r["median_ms"]) and float(r["median_ms"]) > 0
PY

# JSON, the trace and the report of one profile.
if ! "$FUSEC" "$ir" --device=cpu --profile --profile-format=json --profile-runs=4 --trace "$tmp/trace.json" \
     --report "$tmp/report.html" >"$tmp/prof.json" 2>"$tmp/err"; then
  if grep -q "no cJSON" "$tmp/err"; then echo "SKIP: JSON profiles (no cJSON in this build)"; exit $((failed > 0)); fi
  fail "json: $(cat "$tmp/err")"
fi
python3 - "$tmp/prof.json" "$tmp/trace.json" <<'PY' || fail "json or trace: contents"
import json, sys
p = json.load(open(sys.argv[1]))
s = p["summary"]
assert s["graph"] == "small" and s["runs"] == 4 and s["launches"] == 3 and s["kernels"] == 2 and s["library"] == 1
assert s["device_ms"] > 0 and s["wall_ms"] > 0 and s["plain_wall_ms"] > 0 and s["peak_gbps"] > 0
assert len(p["launches"]) == 3 and len(p["timeline"]) == 3
gemm = [l for l in p["launches"] if l["kind"] == "library"][0]
assert gemm["after"] == [0], gemm  # it reads what launch 0 wrote
t = json.load(open(sys.argv[2]))
ev = t["traceEvents"]
phases = [e["name"] for e in ev if e.get("cat") == "compile"]
assert "parse" in phases and "compile" in phases, phases
for e in ev:
    assert e["ph"] in "XMsf", e
    if e["ph"] == "X": assert e["dur"] >= 0 and e["ts"] >= 0
runs = [e for e in ev if e.get("cat") == "run"]
dev = [e for e in ev if e.get("cat") == "device"]
api = [e for e in ev if e.get("cat") == "api"]
assert len(runs) == 4 and len(dev) == 12 and len(api) == 12, (len(runs), len(dev), len(api))
assert {e["pid"] for e in dev} != {e["pid"] for e in api}  # their own tracks
starts = {e["id"] for e in ev if e["ph"] == "s"}
ends = {e["id"] for e in ev if e["ph"] == "f"}
assert starts == ends and len(starts) == 12
assert all(e["args"]["source"].startswith("small.ir:") for e in dev)
PY

# --emit=dot: a graph Graphviz renders, with a cluster per launch.
if "$FUSEC" "$ir" --emit=dot >"$tmp/g.dot" 2>"$tmp/err"; then
  [[ $(grep -c 'subgraph cluster_' "$tmp/g.dot") == 3 ]] || fail "dot: want 3 clusters"
  grep -q 'label="f32\[64, 256\]"' "$tmp/g.dot" || fail "dot: edges labelled with types"
  if command -v dot >/dev/null; then
    dot -Tsvg "$tmp/g.dot" -o "$tmp/g.svg" 2>"$tmp/err" || fail "dot -Tsvg: $(cat "$tmp/err")"
    grep -q '<svg' "$tmp/g.svg" || fail "dot: no SVG"
  else
    echo "SKIP: graphviz's dot not installed"
  fi
elif grep -qi "cuda\|nvrtc" "$tmp/err"; then
  echo "SKIP: --emit=dot compiles for CUDA: $(head -1 "$tmp/err")"
else
  fail "--emit=dot: $(cat "$tmp/err")"
fi

# The report: self-contained, then in a browser.
if grep -qiE '(src|href)="(https?:)?//' "$tmp/report.html"; then fail "report: refers to the network"; fi
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  echo "SKIP: chromium not installed (the report's browser test)"
  exit $((failed > 0))
fi
chrome() { timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/chrome" "$@"; }
chrome --enable-logging=stderr --v=0 --dump-dom "file://$tmp/report.html" >"$tmp/dom.html" 2>"$tmp/chrome.err" ||
  fail "chromium --dump-dom failed"
if grep -q 'CONSOLE' "$tmp/chrome.err"; then fail "report: console messages: $(grep CONSOLE "$tmp/chrome.err")"; fi
chrome --hide-scrollbars --window-size=1200,1400 --screenshot="$tmp/shot.png" "file://$tmp/report.html" \
  >/dev/null 2>&1 || fail "chromium --screenshot failed"
# The table as the browser has it equals the JSON profile; a page sorted by
# the script (the same report with a call to it appended) is in order.
sed 's|</body>|<script>sortBy(0);sortBy(0);</script></body>|' "$tmp/report.html" >"$tmp/sorted.html"
chrome --dump-dom "file://$tmp/sorted.html" >"$tmp/sorted_dom.html" 2>/dev/null || fail "chromium (sorted) failed"
python3 - "$tmp/dom.html" "$tmp/prof.json" "$tmp/shot.png" "$tmp/sorted_dom.html" <<'PY' || fail "report: contents"
import json, re, struct, sys, zlib
dom = open(sys.argv[1]).read()
prof = json.load(open(sys.argv[2]))
cells = re.findall(r'<td class="median" data-v="([^"]+)">([^<]+)</td>', dom)
want = [l["median_ms"] for l in prof["launches"]]
assert len(cells) == len(want) == 3, (cells, want)
for (v, text), w in zip(cells, want):
    assert abs(float(text) - w) <= 5e-5 and abs(float(v) - w) <= 1e-6 * max(1, w), (text, v, w)
for sid in ("timeline", "roofline", "graph"):
    assert f'<svg id="{sid}"' in dom, sid
assert dom.count('class="point"') == 3
# The screenshot: a PNG whose pixels are not all one colour.
png = open(sys.argv[3], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(png):
    n, kind = struct.unpack(">I4s", png[pos:pos + 8])
    if kind == b"IDAT": idat += png[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
assert len(set(raw)) > 16, "the screenshot is blank"
# Sorted by the launch column, clicked twice: descending, then ascending
# (the page comes sorted by time, the GEMM first).
sd = open(sys.argv[4]).read()
got = [int(v) for v in re.findall(r'<tr><td data-v="(\d+)">', sd)]
orig = [int(v) for v in re.findall(r'<tr><td data-v="(\d+)">', dom)]
assert got == sorted(orig) and got != orig, (got, orig)
PY

# Bad usage.
"$FUSEC" "$ir" --device=cpu --profile --profile-format=xml >/dev/null 2>"$tmp/err"
[[ $? == 2 ]] && grep -q "profile-format" "$tmp/err" || fail "--profile-format=xml: want exit 2"
"$FUSEC" "$ir" --device=ref --profile >/dev/null 2>"$tmp/err"
[[ $? == 6 ]] || fail "--profile on ref: want exit 6 (unsupported), got: $(cat "$tmp/err")"

if ((failed)); then echo "test_profile: $failed failed"; exit 1; fi
echo "test_profile: ok"
