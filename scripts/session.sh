#!/usr/bin/env bash
# Opens a session on a celeriant-gateway with standard tools (openssl, curl), the way a device
# does (docs/protocol.md, "Sessions"): RSA-2048 key, SPKI DER in base64, the current Unix time in
# milliseconds as the nonce, an RSASSA-PKCS1-v1_5 / SHA-256 signature over it.
#
#   scripts/session.sh GATEWAY_URL [KEY_FILE]
#
# KEY_FILE (default device-key.pem) is created with a new RSA-2048 key when it does not exist;
# the same key is the same client id. With APP_TOKEN set, it is sent as the app's token
# (Authorization: Bearer). Prints the gateway's JSON answer ({"clientId", "token", "expiresAt",
# "serverTime"}); exits 1 when the gateway refused.
#
#   TOKEN=$(scripts/session.sh http://127.0.0.1:8080 | jq -r .token)
#   curl -H "Authorization: Bearer $TOKEN" -H "DPoP: $(scripts/proof.sh device-key.pem GET /v1/... "$TOKEN")" ...
# (every request under a session needs a fresh proof signed by the same key: scripts/proof.sh)
set -euo pipefail
GATEWAY=${1:?usage: scripts/session.sh GATEWAY_URL [KEY_FILE]}
KEY=${2:-device-key.pem}

if [ ! -f "$KEY" ]; then
  (umask 077 && openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$KEY" 2>/dev/null)
fi
PUBLIC_KEY=$(openssl pkey -in "$KEY" -pubout -outform DER | base64 -w0)
NONCE=$(date +%s%3N)
SIGNATURE=$(printf '%s' "$NONCE" | openssl dgst -sha256 -sign "$KEY" | base64 -w0)

AUTH=()
if [ -n "${APP_TOKEN:-}" ]; then AUTH=(-H "Authorization: Bearer $APP_TOKEN"); fi
BODY=$(curl -sS -o /dev/stdout -w '\n%{http_code}' -X POST "$GATEWAY/v1/session" "${AUTH[@]}" \
  -H 'Content-Type: application/json' \
  -d "{\"publicKey\":\"$PUBLIC_KEY\",\"nonce\":\"$NONCE\",\"signature\":\"$SIGNATURE\"}")
STATUS=${BODY##*$'\n'}
echo "${BODY%$'\n'*}"
[ "$STATUS" = 200 ] || { echo "session refused: HTTP $STATUS" >&2; exit 1; }
