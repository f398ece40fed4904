#!/bin/bash
# Runs one eval-edits command from the worktree root with one thread, sends its
# JSON to $1 and writes $1.meta.json beside it (commit, date, command, wall
# time, exit status), so every stored number names what produced it.
# usage: studies/memit_gemma/timed.sh OUT.json ARGS-OF-interp.cli...
set -u
out=$1; shift
cd "$(dirname "$0")/../.."
commit=$(git rev-parse HEAD)
dirty=$(git status --porcelain -- interp | wc -l)
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s.%N)
OMP_NUM_THREADS=1 /work/main/.venv/bin/python -m interp.cli "$@" > "$out" 2> "$out.stderr"
rc=$?
t1=$(date +%s.%N)
/work/main/.venv/bin/python - "$out.meta.json" "$commit" "$dirty" "$start" "$t0" "$t1" "$rc" "$@" <<'PY'
import json, sys
path, commit, dirty, start, t0, t1, rc, *args = sys.argv[1:]
json.dump({"commit": commit, "interp_files_uncommitted": int(dirty), "date_utc": start,
           "command": "OMP_NUM_THREADS=1 python -m interp.cli " + " ".join(args),
           "wall_s": round(float(t1) - float(t0), 1), "exit_status": int(rc)},
          open(path, "w"), indent=1)
PY
exit $rc
