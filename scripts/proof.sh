#!/usr/bin/env bash
# Makes the DPoP request proof a write, read, watch or members request needs under a session
# (docs/protocol.md, "Request proofs"), with standard tools (openssl): a compact JWS, RS256,
# typ dpop+jwt, the device key's public half as jwk, over the method, the path and query, the
# SHA-256 of the body and of the session token, the time and a random jti.
#
#   scripts/proof.sh KEY_FILE METHOD PATH_AND_QUERY TOKEN [BODY]
#
# KEY_FILE is the key the session was opened with (scripts/session.sh). Prints the proof; each
# proof is good for one request, within 30 s.
#
#   BODY='{"clientId":...}'
#   curl -H "Authorization: Bearer $TOKEN" -H "DPoP: $(scripts/proof.sh device-key.pem POST /v1/write "$TOKEN" "$BODY")" \
#        -H 'Content-Type: application/json' -d "$BODY" http://127.0.0.1:8080/v1/write
set -euo pipefail
KEY=${1:?usage: scripts/proof.sh KEY_FILE METHOD PATH_AND_QUERY TOKEN [BODY]}
METHOD=${2:?method}
TARGET=${3:?path and query}
TOKEN=${4:?token}
BODY=${5-}

b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }
hex_to_bytes() { perl -e 'print pack("H*", <STDIN> =~ s/\s//gr)'; }
sha_b64url() { openssl dgst -sha256 -binary | b64url; }

N=$(openssl rsa -in "$KEY" -noout -modulus 2>/dev/null | cut -d= -f2 | hex_to_bytes | b64url)
E_HEX=$(openssl rsa -in "$KEY" -noout -text 2>/dev/null | sed -n 's/^publicExponent: [0-9]* (0x\([0-9a-fA-F]*\))$/\1/p')
[ $(( ${#E_HEX} % 2 )) -eq 1 ] && E_HEX="0$E_HEX"
E=$(printf '%s' "$E_HEX" | hex_to_bytes | b64url)
HEADER=$(printf '{"typ":"dpop+jwt","alg":"RS256","jwk":{"kty":"RSA","n":"%s","e":"%s"}}' "$N" "$E" | b64url)
JTI=$(openssl rand 16 | b64url)
ATH=$(printf '%s' "$TOKEN" | sha_b64url)
BH=$(printf '%s' "$BODY" | sha_b64url)
CLAIMS=$(printf '{"jti":"%s","htm":"%s","htu":"%s","iat":%s,"ath":"%s","bh":"%s"}' \
  "$JTI" "$METHOD" "$TARGET" "$(date +%s)" "$ATH" "$BH" | b64url)
SIGNATURE=$(printf '%s.%s' "$HEADER" "$CLAIMS" | openssl dgst -sha256 -sign "$KEY" | b64url)
printf '%s.%s.%s\n' "$HEADER" "$CLAIMS" "$SIGNATURE"
