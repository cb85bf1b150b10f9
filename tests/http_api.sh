#!/usr/bin/env bash
# docs/http-api.md's examples: starts examples/http_service on a free port and
# runs each block marked checked with curl, in order; the output must be the
# doc's, the times (*_ms fields) aside. Then SIGTERM stops the service cleanly.
# Usage: http_api.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
top=${1:?usage: http_api.sh SOURCE_DIR BUILD_DIR}
build=$(cd "${2:?usage: http_api.sh SOURCE_DIR BUILD_DIR}" && pwd)
scratch=$(mktemp -d)
service=""
trap '[ -n "$service" ] && kill "$service" 2>/dev/null; rm -rf "$scratch"' EXIT
"$build/examples/http_service" "$scratch/data" 127.0.0.1:0 >"$scratch/out" &
service=$!
for _ in $(seq 100); do
  grep -q "listening on" "$scratch/out" 2>/dev/null && break
  sleep 0.05
done
endpoint=$(sed -n 's/^listening on //p' "$scratch/out")
[ -n "$endpoint" ] || { echo "http_api: the service did not start"; exit 1; }
python3 - "$top/docs/http-api.md" "$endpoint" <<'PY'
import re, subprocess, sys
doc, endpoint = sys.argv[1:]
text = open(doc).read()
blocks = re.findall(r"<!-- checked -->\n```console\n(.*?)```", text, re.S)
assert len(blocks) >= 10, f"only {len(blocks)} checked examples"
times = lambda s: re.sub(r'(_ms":)\d+', r'\1N', s).rstrip()
for block in blocks:
    lines = block.splitlines()
    assert lines[0].startswith("$ curl "), lines[0]
    command = lines[0][2:].replace("localhost:8080", endpoint)
    got = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30).stdout
    expected = "\n".join(lines[1:])
    if times(got) != times(expected):
        sys.exit(f"docs/http-api.md: `{lines[0]}` printed:\n{got}\n--- but the doc says:\n{expected}")
print(f"{len(blocks)} examples checked")
PY
# Prometheus's own linter takes the engine's exposition as it is (after the
# examples, so that the histograms have samples).
curl -s "$endpoint/metrics" | promtool check metrics || { echo "http_api: promtool check metrics refuses /metrics"; exit 1; }
kill -TERM "$service"
status=0
wait "$service" || status=$?
service=""
[ "$status" = 0 ] || { echo "http_api: the service exited $status on SIGTERM"; exit 1; }
