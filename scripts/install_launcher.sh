#!/usr/bin/env bash
# Installs the `emem` command: a launcher that runs the `emem` of one checkout's .venv.
#   bash scripts/install_launcher.sh [LAUNCHER [CHECKOUT]]   (default /usr/local/bin/emem, this checkout)
# A launcher whose checkout still has its .venv is kept: another clone's set-up (CI's, a second
# working copy) does not take the command over, so deleting that clone leaves the command working.
# A launcher whose checkout is gone, or an older symbolic link, is replaced. To move the command to
# another checkout: rm /usr/local/bin/emem, then run set-up there.
set -euo pipefail
launcher=${1:-/usr/local/bin/emem}
checkout=$(cd "${2:-$(dirname "$0")/..}" && pwd -P)
marker='# emem launcher, written by scripts/setup.sh'

recorded_checkout() { sed -n "s/^checkout='\(.*\)'$/\1/p" "$launcher"; }

if [ -f "$launcher" ] && [ ! -L "$launcher" ] && grep -qx "$marker" "$launcher"; then
  current=$(recorded_checkout)
  if [ -x "$current/.venv/bin/emem" ]; then
    [ "$current" = "$checkout" ] || echo "$launcher runs the emem of $current (kept; see docs/setup.md to move it)"
    exit 0
  fi
fi

case "$checkout" in *"'"*) echo "cannot record a checkout whose path holds a quote: $checkout" >&2; exit 1 ;; esac
install -d "$(dirname "$launcher")"
cat > "$launcher.new" <<EOF
#!/bin/sh
$marker
# It runs the emem command of this checkout (docs/setup.md).
checkout='$checkout'
if [ ! -x "\$checkout/.venv/bin/emem" ]; then
  echo "emem: the checkout this command runs, \$checkout, is gone (or has no .venv)." >&2
  echo "Run 'bash scripts/setup.sh' in a clone of emem: it installs this command again, for that clone." >&2
  exit 127
fi
exec "\$checkout/.venv/bin/emem" "\$@"
EOF
chmod 755 "$launcher.new"
mv -f "$launcher.new" "$launcher"
echo "$launcher runs the emem of $checkout"
