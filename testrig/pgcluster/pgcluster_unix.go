//go:build unix

package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// owner is who runs the cluster's programs: nil for this process's user.
type owner struct{ cred *syscall.Credential }

// Init initialises a cluster in dir/data (dir is created if missing) with
// initdb: superuser postgres, trust authentication, UTF8. As root, dir is
// given to the postgres user and initdb runs as that user (see the package
// doc); without that user it returns ErrNoOwner.
func Init(ctx context.Context, bin, dir string) (*Cluster, error) {
	c, err := Prepare(bin, dir)
	if err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", c.Data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		if blocked := c.blockedAbove(); blocked != "" {
			return nil, fmt.Errorf("initdb: %v: the postgres user cannot enter %s (initialise the cluster under a directory it can enter, such as the system's temporary directory)\n%s", err, blocked, out)
		}
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return c, nil
}

// Prepare makes dir (and, as root, gives it to the postgres user) for a
// cluster whose data directory, dir/data, another program will make: a
// replica's, which pg_basebackup copies from its primary (run it with
// [Cluster.Command]). Init is Prepare and initdb.
func Prepare(bin, dir string) (*Cluster, error) {
	c := &Cluster{Bin: bin, Dir: dir, Data: filepath.Join(dir, "data")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoOwner, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Credential is the user the cluster's programs run as (nil: this
// process's user), for a caller that starts them itself.
func (c *Cluster) Credential() *syscall.Credential { return c.cred }

// Command returns a command that runs one of the server programs (such as
// "postgres" or "pg_ctl") as the cluster's owner, in a process group of its
// own, with the cluster's directory as its working directory.
func (c *Cluster) Command(program string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.Bin, program), args...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd
}

// blockedAbove names the first directory above the cluster's that its
// owner cannot search by the permission bits, or "" (supplementary groups
// are not considered: this only explains a failure).
func (c *Cluster) blockedAbove() string {
	if c.cred == nil {
		return ""
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return ""
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			m := st.Mode
			ok := m&0o001 != 0 || (st.Uid == c.cred.Uid && m&0o100 != 0) || (st.Gid == c.cred.Gid && m&0o010 != 0)
			if !ok {
				return fmt.Sprintf("%s (mode %o)", p, m&0o777)
			}
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}
