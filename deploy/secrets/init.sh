#!/bin/sh
# Creates the secrets docker-compose.yml mounts, each a random 64-digit hex string (the device accounts:
# dev-1 with a random password), and leaves existing ones alone. Run it once before `docker compose up`.
set -eu
dir=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
# Only the owner may enter the directory; the files themselves must be readable by the containers'
# users (heartbeatd runs as nonroot), which see the files, not the directory.
chmod 700 "$dir"
for name in api-token api-token-wall mqtt-password grafana-admin-password; do
	f="$dir/$name"
	if [ -s "$f" ]; then
		echo "$f exists; kept"
		continue
	fi
	(umask 022 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f")
	echo "$f created"
done
# Device accounts for Mosquitto, "device-id:password" a line (deploy/mosquitto.acl lets each publish only
# its own signals). One to start with.
f="$dir/mqtt-devices"
if [ -s "$f" ]; then
	echo "$f exists; kept"
else
	(umask 022 && printf 'dev-1:%s\n' "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$f")
	echo "$f created (device account dev-1)"
fi
