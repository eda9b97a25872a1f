#!/usr/bin/env bash
# Write .env with a fresh random SECRET_KEY, DELAY_SECRETS_KEYS (the Fernet key that encrypts
# webhook secrets at rest, in Fernet.generate_key()'s form) and DELAY_METRICS_TOKEN (what
# Prometheus sends to read the metrics; DELAY_PRODUCTION=1 requires it) the first time; never committed (see
# .gitignore). An .env from before keeps what it has: docs/security.md#webhook-secrets-at-rest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .env ] && exit 0
umask 077
{
  printf 'SECRET_KEY=%s\n' "$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')"
  printf 'DELAY_SECRETS_KEYS=%s\n' \
    "$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())')"
  printf 'DELAY_METRICS_TOKEN=%s\n' "$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
} > .env
echo "wrote .env with a new SECRET_KEY, DELAY_SECRETS_KEYS and DELAY_METRICS_TOKEN"
