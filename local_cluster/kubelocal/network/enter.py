"""Run a command inside a pod's network namespace, with the pod's files bind-mounted in a private mount
namespace (and, given one, the pod's hostname in a private UTS namespace, and its own directory as /tmp).

`enter_argv` builds the command line (nsenter, then unshare, then sh mounting the files and exec'ing the
command), so the process the caller spawns becomes the command itself: its PID is the container's PID, and
no Python runs in between. `python -m kubelocal.network.enter --netns NAME --hosts F --resolv F -- cmd...`
does the same from a shell.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

NETNS_DIR = "/run/netns"
TMP = "/tmp"
_UNDER_TMP = re.compile(r"(?<![\w.-])/tmp/([^/\s:;,=\'\"]+)")


def tmp_keeps(texts: Iterable[str]) -> list[str]:
    """The host paths under /tmp a pod is given (named in its command, env, working directory or volumes): each
    existing `/tmp/<name>` named, so that a private /tmp still shows them at their paths. Sorted, no repeats."""
    names = {match[1] for text in texts for match in _UNDER_TMP.finditer(text)}
    return sorted(f"{TMP}/{name}" for name in names if os.path.lexists(f"{TMP}/{name}"))


def private_tmp_script(tmp: Path, keeps: Sequence[str]) -> list[str]:
    """Shell lines that make `tmp` the namespace's /tmp, each of `keeps` (host paths under /tmp) still at its
    path: bound onto a mount point of the same name inside `tmp` first, then `tmp` with them over /tmp. The
    mount points are made here, on the host, as empty directories or files in `tmp`."""
    lines = []
    for keep in keeps:
        rel = Path(keep).relative_to(TMP)
        point = tmp / rel
        if Path(keep).is_dir():
            point.mkdir(parents=True, exist_ok=True)
        else:
            point.parent.mkdir(parents=True, exist_ok=True)
            point.touch(exist_ok=True)
        lines.append(f"mount --bind {shlex.quote(keep)} {shlex.quote(str(point))}")
    lines.append(f"mount --rbind {shlex.quote(str(tmp.resolve()))} {TMP}")
    return lines


def enter_argv(
    netns: str, binds: Sequence[tuple[str | Path, str]], command: Sequence[str], *, hostname: str | None = None,
    tmp: Path | None = None, tmp_keep: Sequence[str] = (),
) -> list[str]:
    """argv that runs `command` in netns `netns` with each (host path, pod path) bind-mounted over the pod path;
    given `tmp`, that directory is its /tmp (with the host paths of `tmp_keep` still at their paths)."""
    if not command:
        raise ValueError("command: empty (give the program to run in the pod)")
    script = ["set -e"]
    for src, dst in binds:
        src_path = Path(src)
        if not src_path.exists():
            raise ValueError(f"bind {src} -> {dst}: {src} does not exist")
        if not str(dst).startswith("/"):
            raise ValueError(f"bind {src} -> {dst}: the pod path must be absolute")
        if src_path.is_dir():
            # A missing mount point under /run (the ServiceAccount's /var/run/secrets/...) is made in a tmpfs of
            # the pod's own over /run, never in the host's tree: an empty /var/run/secrets/kubernetes.io there
            # tells host tools (Kubeflow's SDK, client libraries) that they run in a pod.
            q = shlex.quote(dst)
            script.append(f'if [ ! -d {q} ]; then case "$(realpath -m {q})" in /run/*) '
                          '[ -n "$run_tmpfs" ] || { mount -t tmpfs -o mode=755 tmpfs /run; run_tmpfs=1; };; esac; '
                          f'mkdir -p {q}; fi')
        script.append(f"mount --bind {shlex.quote(str(src_path.resolve()))} {shlex.quote(dst)}")
    if tmp is not None:
        script += private_tmp_script(tmp, tmp_keep)
    if hostname:
        script.append(f"printf %s {shlex.quote(hostname)} > /proc/sys/kernel/hostname")  # this UTS namespace's
    script.append('exec "$@"')
    unshare = ["unshare", "--mount", "--propagation", "private", *(["--uts"] if hostname else [])]
    return [
        "nsenter", f"--net={NETNS_DIR}/{netns}", "--",
        *unshare, "--",
        "sh", "-c", "\n".join(script), "sh", *command,
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    """The command-line launcher; replaces this process with the command."""
    parser = argparse.ArgumentParser(prog="python -m kubelocal.network.enter", description=__doc__)
    parser.add_argument("--netns", required=True, help="the pod's network namespace (ip netns list)")
    parser.add_argument("--hosts", help="file to mount over /etc/hosts")
    parser.add_argument("--resolv", help="file to mount over /etc/resolv.conf")
    parser.add_argument("--serviceaccount", help="directory to mount at /var/run/secrets/kubernetes.io/serviceaccount")
    parser.add_argument("--hostname", help="the pod's hostname (a private UTS namespace)")
    parser.add_argument("--bind", action="append", default=[], metavar="SRC=DST", help="any other bind mount")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    binds: list[tuple[str | Path, str]] = []
    if args.hosts:
        binds.append((args.hosts, "/etc/hosts"))
    if args.resolv:
        binds.append((args.resolv, "/etc/resolv.conf"))
    if args.serviceaccount:
        binds.append((args.serviceaccount, "/var/run/secrets/kubernetes.io/serviceaccount"))
    for pair in args.bind:
        src, sep, dst = pair.partition("=")
        if not sep or not src or not dst:
            parser.error(f"--bind {pair!r}: expected HOST_PATH=/PATH/IN/POD")
        binds.append((src, dst))
    if not os.path.exists(f"{NETNS_DIR}/{args.netns}"):
        parser.error(f"--netns {args.netns!r}: no such network namespace (see `ip netns list`)")
    try:
        full = enter_argv(args.netns, binds, command, hostname=args.hostname)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.flush()
    os.execvp(full[0], full)


if __name__ == "__main__":
    main()
