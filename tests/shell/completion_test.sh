#!/usr/bin/env bash
# `bwplan completion bash|zsh|fish`: the bash script completes commands, flags and choice values when sourced;
# the zsh and fish scripts pass their shell's syntax check where that shell is installed.
#   tests/shell/completion_test.sh BWPLAN
set -euo pipefail
bwplan=$1
# shellcheck disable=SC1090
source <("$bwplan" completion bash)
complete_words() {  # complete_words WORD... : COMPREPLY for the last word
  COMP_WORDS=(bwplan "$@")
  COMP_CWORD=$#
  COMPREPLY=()
  _bwplan
  echo "${COMPREPLY[*]}"
}
check() {
  local got
  got=$(complete_words "${@:2}")
  if [[ "$got" != "$1" ]]; then echo "completion of '${*:2}': expected '$1', got '$got'" >&2; exit 1; fi
}
check estimate estim
check completion complet
check --bf16-layers estimate Llama-3.1-8B --bf16
check "fp32 bf16" estimate Llama-3.1-8B --master ''
check "none full hybrid grad-op optimizer" sagemaker --sharding ''
check "bash zsh fish" completion ''
check "--emit" recommend --emi
check "llama-3.1-8b" estimate llama-3.1-8
check calibrate calib
check "--bands-only" calibrate --bands
check "--probe" sagemaker --prob
check "text json" calibrate --format ''
for sh in zsh fish; do
  if command -v "$sh" >/dev/null; then
    "$bwplan" completion "$sh" > "${TMPDIR:-/tmp}/bwplan-completion.$sh"
    "$sh" -n "${TMPDIR:-/tmp}/bwplan-completion.$sh"
  else
    echo "completion_test: $sh not installed, its script is not syntax-checked"
  fi
done
echo "completion_test: ok"
