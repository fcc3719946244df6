#!/usr/bin/env bash
# The web panel in a real browser (Tests/Browser/panel_test.py): headless Chromium driven by
# Debian's python3-selenium against a started `findmy serve`. Prints "browser: N passed, M failed";
# exits non-zero on any failure, which fails `make test`. Screenshots: .build/artifacts/browser/.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${FINDMY_BIN:-$(cd "$repo" && swift build --show-bin-path)/findmy}
# Debian's interpreter: python3-selenium is installed for it, not for a pyenv or venv python3.
exec /usr/bin/python3 "$repo/Tests/Browser/panel_test.py" --findmy "$bin" --artifacts "$repo/.build/artifacts/browser" "$@"
