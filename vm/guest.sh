#!/bin/bash
# Runs inside the test VM (started by the image's init, see vm/build-image.sh), as root, with the run
# folder the host shares at /mnt/run:
#   src.tar     the checkout (tracked and untracked, not ignored files: what a fresh clone would hold)
#   steps.txt   one step a line: NAME<TAB>TIMEOUT_S<TAB>COMMAND (bash, run in the unpacked checkout)
#   env         NAME=VALUE lines every step gets (may be empty)
# It writes /mnt/run/out/: <step>.log per step, steps.jsonl, summary.json (last), and progress lines
# "hpnlab-vm: ..." on the console, which vm/run.py shows as they come.
set -u
R=/mnt/run
OUT=$R/out
mkdir -p "$OUT"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 CI=true
export HPNLAB_IN_VM=1 HPNLAB_NO_TEST_TOOLS=1 OUT
say() { echo "hpnlab-vm: $*"; }
say "guest started: kernel $(uname -r), $(nproc) cpus, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MiB"
# env: variables every step gets (vm/run.py writes HPNLAB_SPEC_OVERRIDES there under TCG); sudo's steps
# act on the lab a previous step brought up, as that lab's state records it
if [ -s "$R/env" ]; then
  set -a; . "$R/env"; set +a
  say "every step with: $(cat "$R/env")"
fi

src=/root/hpnlab
mkdir -p "$src"
tar -xf "$R/src.tar" -C "$src" || { say "cannot unpack src.tar"; exit 1; }
cd "$src" || exit 1
: >"$OUT/steps.jsonl"

while IFS=$'\t' read -r name tmo cmd; do
  [ -z "$name" ] && continue
  case "$name" in \#*) continue ;; esac
  say "step $name: $cmd"
  t0=$(date +%s.%N)
  timeout -k 15 "$tmo" bash -c "$cmd" >"$OUT/$name.log" 2>&1 </dev/null
  rc=$?
  dt=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
  printf '{"step": "%s", "rc": %d, "seconds": %s}\n' "$name" "$rc" "$dt" >>"$OUT/steps.jsonl"
  say "step $name: exit $rc in ${dt} s; last lines:"
  tail -n 4 "$OUT/$name.log" | sed 's/^/    /'
done <"$R/steps.txt"

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
json.dump({"kernel": os.uname().release, "steps": steps}, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
say "done"
