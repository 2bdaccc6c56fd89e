#!/usr/bin/env bash
# The HTML report test renders report.html in headless Chromium (Debian's package). Install it
# when missing and we can (root with apt-get); otherwise say so and let that one test skip.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the report rendering test"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    && exit 0
fi
echo "warning: chromium is not installed and cannot be installed here; the HTML render test will skip" >&2
exit 0
