#!/usr/bin/env bash
# Write errors fail the command: standard output or -o FILE on a full device (/dev/full) is one line on stderr
# and exit 2, never a silent exit 0.
#   tests/shell/write_errors_test.sh BWPLAN CONFIGS_DIR
set -uo pipefail
bwplan=$1
configs=$2
[ -w /dev/full ] || { echo "write_errors_test: no /dev/full here"; exit 77; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
expect_2() {  # expect_2 DESCRIPTION: the previous command exited 2 with one line on stderr
  local rc=$1 what=$2
  if [ "$rc" -ne 2 ] || [ "$(wc -l < "$err")" -ne 1 ]; then
    echo "$what: expected exit 2 and one line on stderr, got exit $rc:" >&2; cat "$err" >&2; exit 1
  fi
}
"$bwplan" hardware > /dev/full 2> "$err"; expect_2 $? "hardware > /dev/full"
"$bwplan" estimate Llama-3.2-1B --gpu h100 > /dev/full 2> "$err"; expect_2 $? "estimate > /dev/full"
"$bwplan" completion bash > /dev/full 2> "$err"; expect_2 $? "completion bash > /dev/full"
"$bwplan" check "$configs/examples/llama-3.1-8b-p6-b200.json" -o /dev/full 2> "$err"; expect_2 $? "check -o /dev/full"
"$bwplan" recommend Llama-3.2-1B --gpu h100 --emit plan -o /dev/full 2> "$err"; expect_2 $? "recommend --emit plan -o /dev/full"
echo "write_errors_test: ok"
