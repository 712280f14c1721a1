# After install or upgrade (deb postinst, rpm %post): the blkprof system user and its state
# directory. Idempotent; never touches an existing user.
if ! getent passwd blkprof >/dev/null; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers /usr/lib/sysusers.d/blkprof.conf
    else
        useradd --system --user-group --home-dir /var/lib/blkprof --no-create-home \
            --shell /usr/sbin/nologin --comment "blkprof block-IO agent" blkprof
    fi
fi
install -d -m 0700 -o blkprof -g blkprof /var/lib/blkprof
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
