"""ir_variants.py - rewrites of an example's .ir text that the benchmarks
measure beside the example itself (no PyTorch needed, so the GPU scripts
can write the files before anything else runs).

    python3 bench/ir_variants.py layernorm_after examples/gpt2_block_bf16.ir OUT.ir
"""
import sys


def layernorm_after(text):
    """The GPT-2 block with a layernorm reading its result, as the next
    block's does in a model (docs/NUMERICS.md, "Residual sums")."""
    text = text.replace(") {\n", ", %lnf_w: bf16[768], %lnf_b: bf16[768]) {\n", 1)
    return text.replace("  return %y\n", "  %z = layernorm(%y, %lnf_w, %lnf_b, axis=-1, eps=1e-5)\n  return %z\n")


VARIANTS = {"layernorm_after": layernorm_after}

if __name__ == "__main__":
    name, src, dst = sys.argv[1:4]
    with open(src) as f:
        text = VARIANTS[name](f.read())
    with open(dst, "w") as f:
        f.write(text)
