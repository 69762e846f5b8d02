package targets

import (
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/targets/mysql"
	"github.com/fencecheck/fencecheck/targets/postgres"
)

func init() {
	register("postgres", "PostgreSQL 15 + 2 fenced adapters in containers (a lock row per lock, granted by one upsert; conditional write UPDATE ... WHERE token < $2)",
		func(o Options) (harness.Target, error) { return postgres.New(postgres.Options{}), nil })
	register("postgres-trigger", "PostgreSQL 15 + 2 adapters that write plainly; a BEFORE UPDATE trigger rejects stale tokens",
		func(o Options) (harness.Target, error) {
			return postgres.New(postgres.Options{Mode: postgres.Trigger}), nil
		})
	register("postgres-async", "PostgreSQL 15 with synchronous_commit = off + 2 adapters: acknowledged commits can vanish at a crash (expected invalid under restart)",
		func(o Options) (harness.Target, error) { return postgres.New(postgres.Options{Async: true}), nil })
	register("mysql", "MariaDB 10.11 (InnoDB, every commit fsynced) + 2 fenced adapters in containers (a lock row per lock, one conditional upsert per write)",
		func(o Options) (harness.Target, error) { return mysql.New(), nil })
}
