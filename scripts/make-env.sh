#!/usr/bin/env bash
# Write .env with a fresh random SECRET_KEY the first time (never committed; see .gitignore).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .env ] && exit 0
umask 077
printf 'SECRET_KEY=%s\n' "$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')" > .env
echo "wrote .env with a new SECRET_KEY"
