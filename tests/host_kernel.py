# host_kernel.py - compiles a kernel's source and its check with
# tests/test_decode_host.h's emulation of CUDA (g++, C++20 threads) and
# runs it, in the current folder: for tests/test_decode_host.py and
# tests/test_gemv_host.py.
import os, subprocess, sys
HERE = os.path.dirname(os.path.abspath(__file__))

def run(text):
    """Builds k.cpp from text (the emulation first) and runs it; prints its
    line, FAIL where it exits non-zero, and returns whether it passed. A
    compile error ends the script (exit 2)."""
    open('k.cpp', 'w').write('#include "' + os.path.join(HERE, 'test_decode_host.h') + '"\n' + text)
    r = subprocess.run(['g++', '-std=c++20', '-O1', '-w', '-pthread', 'k.cpp', '-o', 'k'], capture_output=True, text=True)
    if r.returncode:
        print(r.stderr[:3000])
        sys.exit(2)
    r = subprocess.run(['./k'], capture_output=True, text=True)
    print(r.stdout.strip(), '' if r.returncode == 0 else 'FAIL')
    return r.returncode == 0
