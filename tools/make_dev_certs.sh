#!/usr/bin/env bash
# Makes a development CA and the certificates of a Shardline cluster with the `openssl` command:
#
#   tools/make_dev_certs.sh --out DIR --hosts coord.example.com,10.0.0.5 [--workers node-0,node-1]
#                           [--days 365]
#
# Writes (private keys mode 0600, created so; certificates 0644):
#   DIR/ca.pem DIR/ca.key          the CA. ca.pem goes to every client (--tls_ca; shardctl's
#                                  tls_ca=) and to the coordinator (--tls_client_ca, mutual TLS).
#                                  An existing ca.key/ca.pem in DIR is reused, so running the
#                                  script again with more --workers adds their certificates.
#   DIR/server.pem DIR/server.key  the coordinator's certificate (--tls_cert, --tls_key), valid
#                                  for --hosts plus localhost, 127.0.0.1 and ::1.
#   DIR/worker-NODE.pem/.key       one client certificate per worker node (worker --tls_cert,
#                                  --tls_key); it names NODE, which the coordinator checks
#                                  against the worker's --node_name.
# Users and trainers authenticate with tokens and need only ca.pem.
#
# A development CA: keep ca.key off the cluster's machines, or use your organisation's CA.
set -euo pipefail

usage() {
  sed -n '2,6p' "$0" >&2
  exit 2
}

out="" hosts="" workers="" days=365
while (($#)); do
  case "$1" in
    --out) out="${2?"$1 needs a value"}"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --hosts) hosts="${2?"$1 needs a value"}"; shift 2 ;;
    --hosts=*) hosts="${1#*=}"; shift ;;
    --workers) workers="${2?"$1 needs a value"}"; shift 2 ;;
    --workers=*) workers="${1#*=}"; shift ;;
    --days) days="${2?"$1 needs a value"}"; shift 2 ;;
    --days=*) days="${1#*=}"; shift ;;
    -h|--help) usage ;;
    *) echo "make_dev_certs.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n "$out" && -n "$hosts" ]] || usage
command -v openssl >/dev/null || {
  echo "make_dev_certs.sh: needs the openssl command (Debian: apt-get install openssl)" >&2
  exit 1
}

mkdir -p "$out"
cd "$out"
umask 077  # every file is created 0600; certificates are opened to 0644 below
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# A P-256 key and a certificate request for CN=$2 into $1.key / $tmp/$1.csr.
request() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -subj "/CN=$2" -out "$tmp/$1.csr" 2>/dev/null
}
# Signs $tmp/$1.csr with the CA into $1.pem, with the extensions in $2.
sign() {
  printf '%s\n' "$2" >"$tmp/$1.ext"
  openssl x509 -req -in "$tmp/$1.csr" -CA ca.pem -CAkey ca.key -days "$days" -sha256 \
    -set_serial "0x$(openssl rand -hex 16)" -extfile "$tmp/$1.ext" -out "$1.pem" 2>/dev/null
  chmod 644 "$1.pem"
  echo "wrote $out/$1.pem and $out/$1.key"
}

if [[ ! -f ca.key || ! -f ca.pem ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
    -keyout ca.key -out ca.pem -subj "/CN=shardline-dev-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 644 ca.pem
  echo "wrote $out/ca.pem and $out/ca.key"
fi

san="DNS:localhost,IP:127.0.0.1,IP:::1"
first=""
IFS=',' read -ra host_list <<<"$hosts"
for h in "${host_list[@]}"; do
  [[ -n "$h" ]] || continue
  first="${first:-$h}"
  if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then san="$san,IP:$h"; else san="$san,DNS:$h"; fi
done
request server "${first:-localhost}"
sign server "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san"

IFS=',' read -ra worker_list <<<"$workers"
for w in "${worker_list[@]}"; do
  [[ -n "$w" ]] || continue
  if [[ ! "$w" =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "make_dev_certs.sh: worker name \"$w\": use letters, digits, '.', '_', '-'" >&2
    exit 2
  fi
  request "worker-$w" "$w"
  sign "worker-$w" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
subjectAltName=DNS:$w"
done
