package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scriptBin returns a directory of the few programs the image scripts
// run, linked from this machine, with fakes: id prints uid, apt-get (when
// aptInstalls is not nil) logs its arguments to the returned file and, on
// install, creates each program of aptInstalls, and docker fails (no
// engine, no image).
func scriptBin(t *testing.T, uid string, aptInstalls []string) (bin, aptLog string) {
	t.Helper()
	bin = t.TempDir()
	for _, tool := range []string{"mktemp", "rm", "tail", "cat", "sha256sum", "cut", "dirname", "chmod"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s here", tool)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("id", "echo "+uid+"\n")
	write("docker", "exit 1\n")
	aptLog = filepath.Join(bin, "apt.log")
	if aptInstalls != nil {
		var mk strings.Builder
		for _, tool := range aptInstalls {
			mk.WriteString("printf '#!/bin/sh\\n' >" + filepath.Join(bin, tool) + "; chmod +x " + filepath.Join(bin, tool) + "\n")
		}
		write("apt-get", "echo \"$*\" >>"+aptLog+"\ncase \"$1\" in install)\n"+mk.String()+";; esac\n")
	}
	return bin, aptLog
}

// runScript runs a script of docker/ with bash and PATH=bin only.
func runScript(t *testing.T, bin string, script string, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	cmd := exec.Command(bash, append([]string{filepath.Join("..", script)}, args...)...)
	cmd.Env = []string{"PATH=" + bin, "TMPDIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestInstallMissing checks docker/install-missing.sh, which `make
// images` (and so `make demo` and `make test`) and .ci/run use on a fresh
// machine: as root with apt-get it installs what is missing, otherwise it
// prints the one command that does and fails.
func TestInstallMissing(t *testing.T) {
	const script = "docker/install-missing.sh"
	t.Run("nothing missing", func(t *testing.T) {
		bin, _ := scriptBin(t, "0", nil)
		if out, code := runScript(t, bin, script, "base", "tail"); code != 0 || out != "" {
			t.Errorf("exit %d, %q; want 0 and nothing said", code, out)
		}
	})
	t.Run("root with apt-get installs", func(t *testing.T) {
		bin, aptLog := scriptBin(t, "0", []string{"debootstrap"})
		out, code := runScript(t, bin, script, "base", "debootstrap", "cmp:diffutils")
		if code != 1 || !strings.Contains(out, "installing debootstrap diffutils") || !strings.Contains(out, "cmp is still missing") {
			t.Errorf("exit %d:\n%s\nwant diffutils reported still missing (the fake installs only debootstrap)", code, out)
		}
		log, _ := os.ReadFile(aptLog)
		if string(log) != "update -q\ninstall -y -q debootstrap diffutils\n" {
			t.Errorf("apt-get ran %q, want update then install", log)
		}
		bin, _ = scriptBin(t, "0", []string{"debootstrap"})
		if out, code := runScript(t, bin, script, "base", "debootstrap"); code != 0 {
			t.Errorf("exit %d:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(bin, "debootstrap")); err != nil {
			t.Errorf("debootstrap was not installed: %v", err)
		}
	})
	t.Run("not root prints the command", func(t *testing.T) {
		bin, aptLog := scriptBin(t, "1000", []string{"debootstrap"})
		out, code := runScript(t, bin, script, "base", "debootstrap")
		if code != 1 || !strings.Contains(out, "sudo apt-get install -y debootstrap") {
			t.Errorf("exit %d:\n%s", code, out)
		}
		if _, err := os.Stat(aptLog); err == nil {
			t.Error("apt-get ran without root")
		}
	})
	t.Run("no apt-get", func(t *testing.T) {
		bin, _ := scriptBin(t, "0", nil)
		out, code := runScript(t, bin, script, "base", "debootstrap")
		if code != 1 || !strings.Contains(out, "no apt-get") || !strings.Contains(out, "debootstrap") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
}

// TestBaseImageWithoutRootPrintsTheCommand checks that the base image's
// build, which needs debootstrap and so root, prints the one command that
// builds it when run as another user on a machine without the image.
func TestBaseImageWithoutRootPrintsTheCommand(t *testing.T) {
	bin, _ := scriptBin(t, "1000", nil)
	out, code := runScript(t, bin, "docker/debian/build.sh", ImageBase)
	if code != 1 || !strings.Contains(out, "sudo ") || !strings.Contains(out, "docker/debian/build.sh "+ImageBase) {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
