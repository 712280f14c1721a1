# Before the package's files go (deb prerm remove, rpm %preun on erase): stop the agent.
if [ -d /run/systemd/system ]; then
    systemctl stop blkprof-agent.service || true
fi
