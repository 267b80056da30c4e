#!/usr/bin/env bash
# Installs the npm packages the integration, SDK and browser tests use
# (tests/package.json), once.
set -euo pipefail
cd "$(dirname "$0")/../tests"
if [[ ! -d node_modules ]] || [[ package.json -nt node_modules ]]; then
  npm install --no-audit --no-fund --loglevel=error
  touch node_modules
fi
