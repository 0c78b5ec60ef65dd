// Package migrations embeds keysvc's SQL schema migrations, one goose v3
// file per version (NNNNN_name.sql with "-- +goose Up" / "-- +goose Down"
// sections), in two dialects with the same semantics. They are applied by
// store.Migrate, never by store.Open.
package migrations

import (
	"embed"
	"io/fs"
)

var (
	//go:embed postgres/*.sql
	postgresFiles embed.FS
	//go:embed sqlite/*.sql
	sqliteFiles embed.FS
)

// Postgres holds the PostgreSQL migrations at the root of the file system
// (as goose.NewProvider expects them).
var Postgres fs.FS = sub(postgresFiles, "postgres")

// SQLite holds the SQLite migrations at the root of the file system.
var SQLite fs.FS = sub(sqliteFiles, "sqlite")

func sub(f embed.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic("migrations: " + err.Error()) // unreachable: dir is a literal embedded above
	}
	return s
}
