#!/usr/bin/env bash
# check_models.sh - model-check the runtime's wake-up protocols (models/*.pml,
# docs/models.md) with spin: for every model, an exhaustive search must
# find no error, and each of its deliberately broken variants (a macro that
# removes the fence, re-check or lock the protocol depends on) must be
# caught - so a model that could not fail would not pass.
#   scripts/check_models.sh           every model
#   scripts/check_models.sh NAME...   only these (e.g. capability_sleep)
# Prints one line per model and a summary; exits non-zero on any mismatch.
# Run by scripts/test.sh before the build.  Needs spin and gcc (setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

for tool in spin gcc; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "check_models: $tool not found (scripts/setup.sh installs it)" >&2
    exit 1
  }
done

# name | extra pan compile flags | pan run flags | broken variants
models=(
  "capability_sleep|-DSAFETY||BROKEN BROKEN_FENCE"
  "capability_handover|-DSAFETY|-E|BROKEN BROKEN_FENCE BROKEN_TICKER BROKEN_WATCH BROKEN_STRAND BROKEN_BOUND"
  "mvar_block|-DSAFETY||BROKEN BROKEN_RECHECK BROKEN_WAKE BROKEN_TOKEN"
  "spark_steal|-DSAFETY||BROKEN BROKEN_COMPLETE BROKEN_WITHDRAW BROKEN_LEAVE BROKEN_EARLY BROKEN_GIVEBACK"
  "io_wakeup|-DSAFETY||BROKEN BROKEN_ORDER BROKEN_GATE"
  "chan_wait|-DSAFETY||BROKEN BROKEN_WAKE BROKEN_SERVERS"
  "mutex_handoff|-DSAFETY -DCOLLAPSE||BROKEN BROKEN_OWED BROKEN_STORE"
  "ticker_park|-DSAFETY||BROKEN BROKEN_WAKE BROKEN_SKIP"
  "wait_locks|-DSAFETY||BROKEN BROKEN_FENCE BROKEN_ORDER"
  "biased_lock|-DSAFETY||BROKEN BROKEN_FENCE BROKEN_ORDER BROKEN_TRY BROKEN_UNLOCK"
  "biased_spinlock|-DSAFETY||BROKEN BROKEN_FENCE BROKEN_UNLOCK BROKEN_COUNT"
)

work=$(mktemp -d "${TMPDIR:-/tmp}/check_models.XXXXXX")
trap 'rm -rf "$work"' EXIT

# verify MODEL VARIANT CFLAGS RUNFLAGS: build and run pan in its own
# directory; prints "<errors> <states stored>" or "fail <why>".
verify() {
  local model=$1 variant=$2 cflags=$3 runflags=$4
  local dir="$work/$model${variant:+-$variant}"
  mkdir -p "$dir"
  cp "models/$model.pml" "$dir/"
  local define=()
  [[ -n "$variant" ]] && define=("-D$variant")
  (
    cd "$dir" || exit 1
    spin -a "${define[@]}" "$model.pml" >spin.log 2>&1 || { echo "fail spin -a: $(tail -1 spin.log)"; exit 0; }
    # -O0: compiling pan.c takes longer than any search here at -O2.
    # shellcheck disable=SC2086  # flags are words
    gcc -O0 -w -DVECTORSZ=2048 -DMEMLIM=1024 $cflags -o pan pan.c >gcc.log 2>&1 ||
      { echo "fail gcc: $(head -1 gcc.log)"; exit 0; }
    # shellcheck disable=SC2086
    timeout 120 ./pan -n -m1000000 $runflags >pan.log 2>&1
    local errors states
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | tail -1)
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' pan.log | tail -1)
    if [[ -z "$errors" ]]; then echo "fail pan: $(tail -1 pan.log)"; exit 0; fi
    # A pass must be a complete search: not cut short by depth or memory.
    if [[ "$errors" == 0 ]] &&
        grep -q "Search not completed\|out of memory\|max search depth too small" pan.log; then
      echo "fail pan: incomplete search: $(grep -m1 "not completed\|out of memory\|too small" pan.log)"
      exit 0
    fi
    echo "$errors $states"
  )
}

# wanted NAME: was NAME asked for (no arguments: every model)?
wanted() {
  [[ ${#want[@]} -eq 0 ]] && return 0
  local w
  for w in "${want[@]}"; do [[ "$w" == "$1" ]] && return 0; done
  return 1
}
want=("$@")
for w in "${want[@]}"; do
  [[ " ${models[*]} " == *" $w|"* ]] || { echo "check_models: no model named $w" >&2; exit 1; }
done
passed=0 failed=0
for entry in "${models[@]}"; do
  IFS='|' read -r name cflags runflags broken <<<"$entry"
  wanted "$name" || continue
  start=$SECONDS
  problems=()
  read -r errors states <<<"$(verify "$name" "" "$cflags" "$runflags")"
  if [[ "$errors" == fail ]]; then
    problems+=("the model: $states")
  elif [[ "$errors" != 0 ]]; then
    problems+=("the model has $errors error(s) (see: spin -t -p models/$name.pml after a pan run)")
  fi
  caught=()
  for b in $broken; do
    read -r berrors bstates <<<"$(verify "$name" "$b" "$cflags" "$runflags")"
    if [[ "$berrors" == fail ]]; then
      problems+=("-D$b: $bstates")
    elif [[ "$berrors" == 0 ]]; then
      problems+=("-D$b found no error: the model cannot fail")
    else
      caught+=("$b")
    fi
  done
  secs=$((SECONDS - start))
  if [[ ${#problems[@]} -eq 0 ]]; then
    passed=$((passed + 1))
    echo "check_models: $name ok: $states states, 0 errors; broken variant(s) ${caught[*]} caught (${secs}s)"
  else
    failed=$((failed + 1))
    for p in "${problems[@]}"; do echo "check_models: $name FAILED: $p" >&2; done
  fi
done
echo "check_models: $passed model(s) passed, $failed failed"
[[ $failed -eq 0 ]]
