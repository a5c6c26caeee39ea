#!/bin/bash
# make-certs.sh -- throwaway certificates for the TLS integration test.
#
#   make-certs.sh DIR
#
# Writes into DIR (created if missing), every key unencrypted, mode 0600:
#   ca.pem, ca.key                 the test CA
#   server.pem, server.key         CN=localhost, SAN DNS:localhost, IP:127.0.0.1,
#                                  signed by the test CA (serverAuth)
#   client.pem, client.key         CN=delay-bridge-test-client, signed by the
#                                  test CA (clientAuth)
#   other-ca.pem, other-ca.key     a second CA that signed nothing here
# Valid for 2 days from now. Needs the openssl command (exit 3 without it).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found" >&2; exit 3; }
DIR=$1
mkdir -p "$DIR"
cd "$DIR"
umask 077

ca() { # NAME CN
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$1.key" -out "$1.pem" 2>/dev/null
}

leaf() { # NAME CN EXTENSIONS
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

ca ca "delay-bridge test CA"
ca other-ca "an unrelated CA"
leaf server localhost "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf client delay-bridge-test-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
# certificates are public
chmod 0644 ./*.pem
openssl verify -CAfile ca.pem server.pem client.pem >/dev/null
