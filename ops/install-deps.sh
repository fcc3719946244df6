#!/usr/bin/env bash
# Installs the Debian packages findmy needs to build, run and test, only when one is missing.
# Safe to run again; needs root (or sudo) only when something is actually missing.
set -euo pipefail

# postgresql-15 is the server the embedded cluster runs (initdb, pg_ctl, postgres): `make run` needs it.
# libjs-leaflet is the web panel's map, which findmy serves from /usr/share/javascript/leaflet.
# libjs-leaflet.markercluster installs beside it: the panel clusters the markers of a user with many
# devices (without it, every marker is drawn on its own).
# libqrencode-dev draws the setup QR codes of the panel's "Add a device" page (the QRCode module).
# libcurl4-openssl-dev: the push providers' HTTP/2 client (the Push module; Debian's libcurl is built
# with nghttp2).
# libnats-dev: the NATS C client (cnats 3.4), the JetStream event log (the NATSLog module, docs/scale.md).
# libxml2-dev, libarchive-dev: GPX and KML read with libxml2's streaming reader, KMZ and .zip archives
# (a Google Takeout export) read with libarchive (the Import module, docs/import-export.md). Their
# headers only: findmy links neither, it opens libxml2.so.2 and libarchive.so.13 with the first import
# that needs them (Sources/CXML2, Sources/CArchive), installed with the -dev packages.
build_packages=(pkg-config liblz4-dev libmicrohttpd-dev libssl-dev libsodium-dev libpq-dev libqrencode-dev libcurl4-openssl-dev libnats-dev libxml2-dev libarchive-dev postgresql-15 libjs-leaflet libjs-leaflet.markercluster)
# The web panel's browser test (ops/tests/browser.sh): headless Chromium driven by Selenium.
# zbar-tools: zbarimg scans the QR codes the panel draws back to their links (WebPanelTests).
# mosquitto: the real MQTT broker the OwnTracks MQTT tests start on a free port (its config in a
# temporary directory); mosquitto-clients: mosquitto_pub, the publisher those tests use.
# python3-h2, python3-cryptography: the fake APNs, FCM and UnifiedPush servers (ops/tests/fake_push.py,
# HTTP/2 over TLS; the Web Push fake decrypts with cryptography, independently of findmy).
# nats-server (see below): the three-node JetStream cluster the NATSLog tests start on free ports.
# ntfy (see below): the ntfy server the ntfy command channel's end-to-end test publishes to.
# gpsd, gpsd-clients: the agent's tests run a real gpsd fed by gpsfake (gpsd-clients) from the NMEA
# track in Fixtures/agent, on a free port (AgentTests, the agent's end-to-end tests).
# Not installed here: sound-theme-freedesktop, the alarm findmy-agent plays through paplay where a
# PulseAudio or PipeWire server runs. A runtime, optional package of the device (docs/agent.md); the
# tests play through a --sound-command and need no sound.
test_packages=(curl git chromium chromium-driver python3-selenium zbar-tools mosquitto mosquitto-clients python3-h2 python3-cryptography gpsd gpsd-clients)

# Test packages Debian 12 lacks or has too old, taken from Debian 13 (trixie) through an apt pin on
# exactly these packages (everything else stays on bookworm), each with the lowest version we accept:
# - nats-server 2.10: Debian 12's 2.9.10 lets a stream's replicas store messages at different
#   sequences after leader changes (fixed upstream in 2.9.21), which loses acknowledged reports on a
#   findmy JetStream log (docs/scale.md, "Versions").
# - ntfy 2.11 (not in Debian 12): the real ntfy server the ntfy command channel's tests publish to
#   and subscribe from on a free loopback port (docs/commands.md, "ntfy").
trixie_packages=(nats-server:2.10 ntfy:2.11)
trixie_source=/etc/apt/sources.list.d/findmy-trixie.sources
trixie_pin=/etc/apt/preferences.d/findmy-trixie
# The pin's name when it held nats-server alone; replaced by the one above.
trixie_pin_before=/etc/apt/preferences.d/findmy-nats-server

want=("${build_packages[@]}")
if [[ "${1:-}" == "--test" ]]; then
    want+=("${test_packages[@]}")
fi

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for package in "${want[@]}"; do
    if ! installed "$package"; then
        missing+=("$package")
    fi
done

# "name:minimum" of each trixie package that is missing or older than its minimum (with --test).
trixie_wanted=()
if [[ "${1:-}" == "--test" ]]; then
    for entry in "${trixie_packages[@]}"; do
        package=${entry%%:*}
        minimum=${entry#*:}
        if ! installed "$package" \
            || dpkg --compare-versions "$(dpkg-query -W -f='${Version}' "$package")" lt "$minimum"; then
            trixie_wanted+=("$entry")
        fi
    done
fi

if ((${#missing[@]} == 0 && ${#trixie_wanted[@]} == 0)); then
    exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
    sudo_cmd=(sudo)
fi
if ((${#trixie_wanted[@]} > 0)); then
    echo "installing ${trixie_wanted[*]} (name:minimum version) from Debian 13 (trixie), pinned to those packages" >&2
    # The same mirror the machine's bookworm packages come from (its first "URIs:" or "deb" line).
    mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
    if [[ -z $mirror ]]; then
        mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
    fi
    if [[ -z $mirror ]]; then
        echo "install-deps: no Debian mirror found in /etc/apt to take ${trixie_wanted[*]} from trixie" >&2
        exit 1
    fi
    printf '%s\n' "Types: deb" "URIs: $mirror" "Suites: trixie" "Components: main" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | "${sudo_cmd[@]}" tee "$trixie_source" >/dev/null
    # Every trixie package is pinned, not only the wanted ones: a later run must not drop a pin.
    pinned=()
    for entry in "${trixie_packages[@]}"; do pinned+=("${entry%%:*}"); done
    printf '%s\n' "Package: *" "Pin: release n=trixie" "Pin-Priority: 1" "" \
        "Package: ${pinned[*]}" "Pin: release n=trixie" "Pin-Priority: 990" | "${sudo_cmd[@]}" tee "$trixie_pin" >/dev/null
    "${sudo_cmd[@]}" rm -f "$trixie_pin_before"
    for entry in "${trixie_wanted[@]}"; do missing+=("${entry%%:*}"); done
fi

echo "installing missing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Debian's postgresql package would otherwise create and start a "main" cluster listening on
# localhost:5432; findmy runs its own private cluster (docs/postgres.md) and needs none.
if [[ " ${missing[*]} " == *" postgresql-"* && ! -e /etc/postgresql-common/createcluster.conf ]]; then
    "${sudo_cmd[@]}" mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" | "${sudo_cmd[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
