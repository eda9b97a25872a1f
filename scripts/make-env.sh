#!/usr/bin/env bash
# Write .env (never committed, see .gitignore) with every secret that `make run` and
# `docker-compose up` need, each random, so neither needs anything typed by hand. An .env from
# before keeps every value it has: only the variables it lacks are added (so an old .env gains
# the compose ones by running this again), and no DELAY_SECRETS_KEYS if it has none
# (docs/security.md#webhook-secrets-at-rest: the secrets key must never change).
#
# make run and manage.py read .env too (delayplatform/settings.py), so nothing here may change
# what they connect to or answer: the containers' broker URLs and host settings go under CONTAINER_*
# names, which only docker-compose.yml reads (it hands them to the containers as BROKER_URL,
# RABBITMQ_MANAGEMENT_URL, ALLOWED_HOSTS, ...); DATABASE_URL is built in docker-compose.yml from
# POSTGRES_PASSWORD.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077
# an .env that has secrets already but no DELAY_SECRETS_KEYS seals webhook secrets with a key derived
# from its SECRET_KEY: a new key (or a new SECRET_KEY) would leave them unreadable, so neither is added
sealed_by_secret_key=
if [ -s .env ] && ! grep -qE '^(export +)?DELAY_SECRETS_KEYS=' .env; then
  sealed_by_secret_key=1
fi
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
if [ -z "$sealed_by_secret_key" ]; then
  add SECRET_KEY "$(token 50)"
  add DELAY_SECRETS_KEYS \
    "$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())')"
fi
add DELAY_METRICS_TOKEN "$(token 32)"
# the containers only (docker-compose.yml); letters, digits, - and _: they go into URLs as they are
add POSTGRES_PASSWORD "$(token 24)"
add RABBITMQ_ADMIN_PASSWORD "$(token 24)"
add RABBITMQ_PASSWORD "$(token 24)"
password=$(value RABBITMQ_PASSWORD)
add CONTAINER_BROKER_URL "amqp://delayplatform:${password}@rabbitmq:5672//"
add CONTAINER_RABBITMQ_MANAGEMENT_URL "http://delayplatform:${password}@rabbitmq:15672"
# the containers' host settings: an .env from before gave them to both under the settings' own names
# (which make run reads too); their values move over, and the old lines stay for the user to remove
old_hosts=$(value ALLOWED_HOSTS)
add CONTAINER_ALLOWED_HOSTS "${old_hosts:-localhost,127.0.0.1}"
add CONTAINER_CSRF_TRUSTED_ORIGINS "$(value CSRF_TRUSTED_ORIGINS)"
add CONTAINER_TLS_PROXY_HEADER "$(value DELAY_TLS_PROXY_HEADER)"

if [ -n "$sealed_by_secret_key" ]; then
  echo "not added: DELAY_SECRETS_KEYS (and SECRET_KEY if missing): this .env's webhook secrets are sealed with a" \
       "key derived from SECRET_KEY; docs/security.md#webhook-secrets-at-rest says how to set one" >&2
fi
for name in ALLOWED_HOSTS CSRF_TRUSTED_ORIGINS DELAY_TLS_PROXY_HEADER; do
  if grep -qE "^(export +)?$name=" .env; then
    echo "note: .env sets $name, which make run and manage.py read too; the containers read the CONTAINER_ one" \
         "now: remove $name if it was for them (docs/operations/containers.md)" >&2
  fi
done
if [ ${#added[@]} -eq 0 ]; then
  echo ".env has every variable already"
else
  echo "wrote .env: added ${added[*]}"
fi
