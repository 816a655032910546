#!/bin/sh
# Creates the secrets docker-compose.yml mounts, each a random 64-digit hex string, and leaves existing
# ones alone. Run it once before `docker compose up`.
set -eu
dir=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
# Only the owner may enter the directory; the files themselves must be readable by the containers'
# users (heartbeatd runs as nonroot), which see the files, not the directory.
chmod 700 "$dir"
for name in api-token mqtt-password grafana-admin-password; do
	f="$dir/$name"
	if [ -s "$f" ]; then
		echo "$f exists; kept"
		continue
	fi
	(umask 022 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f")
	echo "$f created"
done
