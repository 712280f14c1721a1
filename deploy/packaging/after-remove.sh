# After the package's files went (deb postrm, rpm %postun on erase). The state directory
# (traces and dumps) and the user stay: evidence is not deleted by an uninstall; a deb purge
# removes the directory.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
