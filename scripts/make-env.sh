#!/usr/bin/env bash
# Write .env (never committed, see .gitignore) with every secret that `make run` and
# `docker-compose up` need, each random, so neither needs anything typed by hand. An .env from
# before keeps every value it has: only the variables it lacks are added (so an old .env gains
# the compose ones by running this again; docs/security.md#webhook-secrets-at-rest says why
# DELAY_SECRETS_KEYS must never change).
#
# make run and manage.py read .env too (delayplatform/settings.py), so nothing here may change
# what they connect to: the containers' broker URLs go under CONTAINER_* names, which only
# docker-compose.yml reads (it hands them to the containers as BROKER_URL and
# RABBITMQ_MANAGEMENT_URL); DATABASE_URL is built in docker-compose.yml from POSTGRES_PASSWORD.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077
touch .env
[ -s .env ] && [ -n "$(tail -c 1 .env)" ] && echo >> .env  # a last line without its newline
added=()

token() { python3 -c "import secrets; print(secrets.token_urlsafe($1))"; }
# the value .env gives a variable (the last one, without quotes), empty if none
value() {
  sed -nE "s/^(export +)?$1=//p" .env | tail -n 1 | sed -E "s/^\"(.*)\"\$/\\1/; s/^'(.*)'\$/\\1/"
}
add() {  # add NAME VALUE: only if .env does not set NAME yet
  if ! grep -qE "^(export +)?$1=" .env; then
    printf '%s=%s\n' "$1" "$2" >> .env
    added+=("$1")
  fi
}

# both make run and the containers: Django's signing key, the Fernet key of webhook secrets at
# rest (Fernet.generate_key()'s form), what Prometheus sends to read the metrics
# (DELAY_PRODUCTION=1 requires it)
add SECRET_KEY "$(token 50)"
add DELAY_SECRETS_KEYS \
  "$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())')"
add DELAY_METRICS_TOKEN "$(token 32)"
# the containers only (docker-compose.yml); letters, digits, - and _: they go into URLs as they are
add POSTGRES_PASSWORD "$(token 24)"
add RABBITMQ_ADMIN_PASSWORD "$(token 24)"
add RABBITMQ_PASSWORD "$(token 24)"
password=$(value RABBITMQ_PASSWORD)
add CONTAINER_BROKER_URL "amqp://delayplatform:${password}@rabbitmq:5672//"
add CONTAINER_RABBITMQ_MANAGEMENT_URL "http://delayplatform:${password}@rabbitmq:15672"

if [ ${#added[@]} -eq 0 ]; then
  echo ".env has every variable already"
else
  echo "wrote .env: added ${added[*]}"
fi
