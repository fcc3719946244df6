#!/usr/bin/env bash
# Installs the Debian packages findmy needs to build, run and test, only when one is missing.
# Safe to run again; needs root (or sudo) only when something is actually missing.
set -euo pipefail

# postgresql-15 is the server the embedded cluster runs (initdb, pg_ctl, postgres): `make run` needs it.
# libjs-leaflet is the web panel's map, which findmy serves from /usr/share/javascript/leaflet.
# libqrencode-dev draws the setup QR codes of the panel's "Add a device" page (the QRCode module).
# libcurl4-openssl-dev: the push providers' HTTP/2 client (the Push module; Debian's libcurl is built
# with nghttp2).
# libnats-dev: the NATS C client (cnats 3.4), the JetStream event log (the NATSLog module, docs/scale.md).
build_packages=(pkg-config liblz4-dev libmicrohttpd-dev libssl-dev libsodium-dev libpq-dev libqrencode-dev libcurl4-openssl-dev libnats-dev postgresql-15 libjs-leaflet)
# The web panel's browser test (ops/tests/browser.sh): headless Chromium driven by Selenium.
# zbar-tools: zbarimg scans the QR codes the panel draws back to their links (WebPanelTests).
# mosquitto: the real MQTT broker the OwnTracks MQTT tests start on a free port (its config in a
# temporary directory); mosquitto-clients: mosquitto_pub, the publisher those tests use.
# python3-h2, python3-cryptography: the fake APNs, FCM and UnifiedPush servers (ops/tests/fake_push.py,
# HTTP/2 over TLS; the Web Push fake decrypts with cryptography, independently of findmy).
# nats-server: the three-node JetStream cluster the NATSLog tests start on free ports (docs/scale.md).
test_packages=(curl git chromium chromium-driver python3-selenium zbar-tools mosquitto mosquitto-clients python3-h2 python3-cryptography nats-server)

want=("${build_packages[@]}")
if [[ "${1:-}" == "--test" ]]; then
    want+=("${test_packages[@]}")
fi

missing=()
for package in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done

if ((${#missing[@]} == 0)); then
    exit 0
fi

echo "installing missing Debian packages: ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
    sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
# Debian's postgresql package would otherwise create and start a "main" cluster listening on
# localhost:5432; findmy runs its own private cluster (docs/postgres.md) and needs none.
if [[ " ${missing[*]} " == *" postgresql-"* && ! -e /etc/postgresql-common/createcluster.conf ]]; then
    "${sudo_cmd[@]}" mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" | "${sudo_cmd[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
