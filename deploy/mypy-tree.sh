#!/usr/bin/env bash
# Type-check the whole distribution. The top-level folders install as toposcope.<folder>
# (pyproject's package-dir), which mypy cannot map by itself; this builds a throw-away tree with
# the installed layout under .mypy-tree/ (hard links, so it costs no space) and checks it
# together with bench/, deploy/ and tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=${MYPY_TREE:-.mypy-tree}
rm -rf "$tree"
mkdir -p "$tree"
cp -al toposcope "$tree/toposcope"
for part in exporters agent advisor dashboards sim slurm kube; do
  cp -al "$part" "$tree/toposcope/$part"
done
find "$tree" -name __pycache__ -prune -exec rm -rf {} +
MYPYPATH=$tree "${MYPY:-.venv/bin/mypy}" "$tree/toposcope" bench deploy/stack.py \
  deploy/kubernetes/gen_prometheusrule.py tests
