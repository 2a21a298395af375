#!/usr/bin/env bash
# Formats every C++ file outside third_party/ with .clang-format (Google, 100 columns), in place.
# tests/style:clang_format_test fails on any file this would change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' | grep -v '^third_party/' \
  | while read -r f; do [[ -f "$f" ]] && echo "$f"; done | xargs -r clang-format -i --style=file
