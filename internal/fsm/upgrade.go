package fsm

import (
	"fmt"
	"log/slog"

	pebblev1 "github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/v2/vfs"
	vfsv1 "github.com/cockroachdb/pebble/vfs"

	"github.com/kvd-project/kvd/internal/durable"
)

// kvd's state store moved from Pebble v1 to Pebble v2 (for value
// separation). Stores written by earlier kvd builds are in Pebble v1's
// oldest on-disk format, which v2 no longer opens; so are checkpoints that
// such a build sends as a snapshot. upgradeV1Store brings either to a format
// both versions read, with Pebble v1 itself, before v2 opens it: an upgrade
// in place keeps every acknowledged write, with no dump and reload.

// v1UpgradeTarget is the newest format Pebble v1 writes; Pebble v2 opens it.
const v1UpgradeTarget = pebblev1.FormatVirtualSSTables

// upgradeV1Store upgrades the store in dir if Pebble v2 cannot open it as it
// is. It does nothing for a store already in a newer format, for a directory
// without a store, and on a filesystem other than the OS's (the tests' in-
// memory ones only ever hold stores that this build wrote).
func upgradeV1Store(dir string, fs vfs.FS, logger *slog.Logger) error {
	if fs != vfs.Default {
		return nil
	}
	desc, err := pebblev1.Peek(dir, vfsv1.Default)
	if err != nil {
		// No directory, or a format newer than Pebble v1 knows: nothing to
		// upgrade, and v2's own open reports anything else.
		return nil
	}
	if !desc.Exists || desc.FormatMajorVersion >= pebblev1.FormatFlushableIngest {
		return nil
	}
	logger.Info("upgrading the state store's on-disk format (a one-time rewrite)",
		"dir", dir, "from", desc.FormatMajorVersion.String(), "to", v1UpgradeTarget.String())
	// Opening with a newer FormatMajorVersion ratchets the store; the steps
	// that need old sstables rewritten run their compactions inside Open.
	db, err := pebblev1.Open(dir, &pebblev1.Options{
		FormatMajorVersion: v1UpgradeTarget,
		Logger:             durable.NewPebbleLogger(logger.With("component", "pebble")), // has what v1's Logger asks for
	})
	if err != nil {
		return fmt.Errorf("upgrade state store format: %w", err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("upgrade state store format: close: %w", err)
	}
	return nil
}
