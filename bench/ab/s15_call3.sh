#!/usr/bin/env bash
# Session 15, call 3: the C++ eager autograd path (memattn._autograd) against the Python Function
# on bf16 D = 64/128 plain rows built on the device (build-s15): host time per layer, the suite's
# D = 64/128 rows both ways, and the op's tests on the rows present.
set -u
R=${R:-build-s15}
export PYTHONPATH=$PWD/$R/python:$PWD/bench
(cd bench && python3 host_overhead.py) > $OUT/host.txt 2>&1
rows=0,1,2,4,5,6,8,9,10,12,13,14
python3 bench/bench.py --out $OUT/cpp --only $rows --passes fwd,bwd --commit s15-cpp > $OUT/bench_cpp.log 2>&1
python3 -c "
import runpy, sys
import memattn._ops as o
o._autograd = None
sys.argv = ['bench.py', '--out', '$OUT/py', '--only', '$rows', '--passes', 'fwd,bwd', '--commit', 's15-python']
runpy.run_path('bench/bench.py', run_name='__main__')" > $OUT/bench_py.log 2>&1
(cd /tmp && timeout 240 python3 -m pytest -q -rs -k "cuda and bfloat16" "$OLDPWD/tests/python" -p no:cacheprovider) > $OUT/pytest.txt 2>&1
tail -3 $OUT/pytest.txt
cat $OUT/host.txt
for f in cpp py; do echo "== $f"; cat $OUT/$f/bench.md 2>/dev/null | head -40; done
