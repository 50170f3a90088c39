#!/usr/bin/env bash
# The mutation score of the decision code: cargo-mutants
# (`cargo install cargo-mutants`) mutates the elector's state machine and
# lease-elect's session, and each mutant must be caught by the seeded
# simulation or the crate's unit tests (`cargo test --lib`), the fast
# tests that pin what the simulation cannot reach.
#
#   bash benches/mutants.sh                 # attempt.rs and run.rs
#   bash benches/mutants.sh src/elector/*.rs src/session.rs
#
# It prints `mutants: N caught, M missed, U unviable, T timeouts`, then
# every missed mutant not listed, with the reason it cannot change
# behaviour, in benches/mutants-equivalent.txt (one per line: the
# mutant's name as cargo-mutants prints it, ` # ` and the reason); it
# fails if one is left or anything timed out. A file the public API's
# answers live in is judged by the integration tests that ask for them
# too (benches/mutants-judges.txt). Schedules per mutant:
# LEASE_ELECTOR_SIM_SCHEDULES (2,000 by default; CI's 10,000 takes
# longer). Built with the `sim` profile (opt-level 1, no LTO). Figures on this machine (2 cores): docs/architecture.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || {
  echo "cargo-mutants is not installed: cargo install cargo-mutants" >&2
  exit 2
}
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(src/elector/attempt.rs src/elector/run.rs)
out=${MUTANTS_OUT:-target/mutants}
rm -rf "$out"
mkdir -p "$out"
export LEASE_ELECTOR_SIM_SCHEDULES=${LEASE_ELECTOR_SIM_SCHEDULES:-2000}
# A failing schedule is enough to catch a mutant: stop at the first.
export LEASE_ELECTOR_SIM_MAX_FAILURES=1

# The judges: the unit tests and the simulation for every file, and for a
# file that the public API's answers live in, the integration tests that
# ask for them over loopback HTTP (benches/mutants-judges.txt: a file,
# ": ", its test targets). Files with the same judges run together.
judges_of() {
  awk -v f="$1" 'index($0, f ": ") == 1 { sub(/^[^:]*: */, ""); print }' benches/mutants-judges.txt
}
declare -A group
for f in "${files[@]}"; do
  j=$(judges_of "$f")
  group[" $j"]+=" -f $f"
done
n=0
for j in "${!group[@]}"; do
  n=$((n + 1))
  # The judges' targets are given to every cargo call (--cargo-arg), so
  # each mutant builds only them, not all of the crate's test binaries.
  targets=()
  # shellcheck disable=SC2086 # the test targets are words
  for t in --lib --test=simulation $(sed 's/--test /--test=/g' <<<"$j"); do
    targets+=("--cargo-arg=$t")
  done
  # shellcheck disable=SC2086 # the file flags are words
  cargo mutants ${group[$j]} --features testing --profile sim --no-shuffle \
    --output "$out/$n" --timeout-multiplier 3 --minimum-test-timeout 120 \
    "${targets[@]}" || true
done

python3 - benches/mutants-equivalent.txt "$out"/*/mutants.out/outcomes.json <<'PY'
import json, sys
listed, outcomes = sys.argv[1], sys.argv[2:]
import re
# An entry names a mutant as cargo-mutants prints it, with or without its
# line and column (without, it survives edits elsewhere in the file).
def unplaced(name):
    return re.sub(r"^([^:]+):\d+:\d+:", r"\1:", name)
equivalent = {}
for line in open(listed):
    line = line.strip()
    if line and not line.startswith("#"):
        name, _, why = line.partition(" # ")
        equivalent[unplaced(name.strip())] = why.strip()
count = {"caught": 0, "missed": 0, "unviable": 0, "timeout": 0}
missed = []
for o in [o for path in outcomes for o in json.load(open(path))["outcomes"]]:
    s = o.get("scenario")
    if not isinstance(s, dict) or "Mutant" not in s:
        continue
    name = s["Mutant"]["name"]
    summary = o["summary"]
    key = {"CaughtMutant": "caught", "MissedMutant": "missed", "Unviable": "unviable", "Timeout": "timeout"}.get(summary)
    if key is None:
        continue
    count[key] += 1
    if key in ("missed", "timeout"):
        missed.append((key, name))
print(f'mutants: {count["caught"]} caught, {count["missed"]} missed, {count["unviable"]} unviable, {count["timeout"]} timeouts')
left = [(k, n) for k, n in missed if k == "timeout" or unplaced(n) not in equivalent]
for k, n in left:
    print(f"  {k}: {n}")
listed_missed = [n for k, n in missed if k == "missed" and unplaced(n) in equivalent]
if listed_missed:
    print(f"  ({len(listed_missed)} missed are listed as equivalent in {listed})")
sys.exit(1 if left else 0)
PY
