#!/usr/bin/env bash
# Runs a pytest selection the ways a user, a scheduler or a CI runner starts the suite, and fails if any run fails.
#
#   tests/contexts.sh [--contexts background,nohup,...] [PYTEST ARGS...]    (default: -m signals, every context)
#
# The contexts, each a plain start from this non-interactive script (so no terminal, no job control):
#   background  `pytest ... &`: the shell starts the job with SIGINT and SIGQUIT ignored, stdin /dev/null
#   nohup       `nohup pytest ... &`: SIGHUP ignored too
#   setsid      a new session (no controlling terminal) with stdin /dev/null
#   timeout     under coreutils' `timeout` (its own process group)
#   odd-env     a background job with umask 077, the C locale, an empty HOME, no TERM, started from /
# `make test` is the foreground run. `make test-contexts` runs the signal-sensitive tests (marker `signals`) in every
# context; `tests/contexts.sh --contexts odd-env -q` runs the whole suite in one.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
contexts="background,nohup,setsid,timeout,odd-env"
if [ "${1:-}" = "--contexts" ]; then contexts="$2"; shift 2; fi
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-q -m signals)
# --rootdir and the tests folder by absolute path: the odd-env context starts from /
pytest=("$PY" -m pytest -p no:cacheprovider --rootdir "$REPO" --timeout=900 "${args[@]}")
case " ${args[*]} " in *" tests"*|*" $REPO/tests"*) ;; *) pytest+=("$REPO/tests") ;; esac

logs="$(mktemp -d)"
failed=0
for ctx in ${contexts//,/ }; do
  log="$logs/$ctx.log"
  start=$(date +%s)
  case "$ctx" in
    background) (cd "$REPO" && "${pytest[@]}") > "$log" 2>&1 & wait $!; rc=$? ;;
    nohup) (cd "$REPO" && nohup "${pytest[@]}") > "$log" 2>&1 & wait $!; rc=$? ;;
    setsid) (cd "$REPO" && setsid --wait "${pytest[@]}") < /dev/null > "$log" 2>&1; rc=$? ;;
    timeout) (cd "$REPO" && timeout 3600 "${pytest[@]}") < /dev/null > "$log" 2>&1; rc=$? ;;
    odd-env)
      home="$(mktemp -d)"
      (cd / && umask 077 && env -u TERM HOME="$home" LC_ALL=C LANG=C "${pytest[@]}") > "$log" 2>&1 & wait $!; rc=$?
      rm -rf "$home" ;;
    *) echo "tests/contexts.sh: unknown context '$ctx' (background, nohup, setsid, timeout, odd-env)" >&2; exit 2 ;;
  esac
  summary="$(grep -E '(passed|failed|error|no tests ran)' "$log" | tail -1)"
  echo "context $ctx: ${summary:-no summary line} (exit $rc, $(( $(date +%s) - start )) s)"
  if [ "$rc" -ne 0 ]; then
    failed=1
    grep -E '^(FAILED|ERROR) ' "$log" | sed "s/^/  $ctx: /"
    echo "  full log: $log"
  fi
done
exit $failed
