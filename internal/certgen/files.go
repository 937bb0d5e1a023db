package certgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kvd-project/kvd/internal/atomicfile"
)

const (
	// CertMode: a certificate is public.
	CertMode os.FileMode = 0o644
	// KeyMode: a private key is for its owner only.
	KeyMode os.FileMode = 0o600
)

// Pair names the two files of a certificate: DIR/BASE.crt and DIR/BASE.key.
type Pair struct {
	Cert, Key string
}

// PairIn is the pair named base in dir.
func PairIn(dir, base string) Pair {
	return Pair{Cert: filepath.Join(dir, base+".crt"), Key: filepath.Join(dir, base+".key")}
}

// Existing reports which of the pair's files exist; an error other than
// "does not exist" (a permission problem, say) is returned as is.
func (p Pair) Existing() (cert, key bool, err error) {
	if cert, err = exists(p.Cert); err != nil {
		return false, false, err
	}
	if key, err = exists(p.Key); err != nil {
		return false, false, err
	}
	return cert, key, nil
}

// Write stores certPEM and keyPEM (key first, mode 0600; then the
// certificate, 0644), each atomically. Without overwrite it refuses, before
// writing either, when either file exists: replacing half a pair would leave
// a certificate and a key that do not match.
func (p Pair) Write(certPEM, keyPEM []byte, overwrite bool) error {
	if !overwrite {
		cert, key, err := p.Existing()
		if err != nil {
			return err
		}
		switch {
		case cert:
			return fmt.Errorf("%s: %w (use --force to replace it)", p.Cert, fs.ErrExist)
		case key:
			return fmt.Errorf("%s: %w (use --force to replace it)", p.Key, fs.ErrExist)
		}
	}
	if err := atomicfile.Write(p.Key, keyPEM, KeyMode, overwrite); err != nil {
		return err
	}
	return atomicfile.Write(p.Cert, certPEM, CertMode, overwrite)
}

// Read loads the pair's certificate and key PEM, naming the file that
// could not be read.
func (p Pair) Read() (certPEM, keyPEM []byte, err error) {
	certPEM, err = os.ReadFile(p.Cert)
	if err != nil {
		return nil, nil, fmt.Errorf("read certificate: %w", err)
	}
	keyPEM, err = os.ReadFile(p.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("read key: %w", err)
	}
	return certPEM, keyPEM, nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", path, err)
}
