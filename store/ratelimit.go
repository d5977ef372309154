package store

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/uptrace/bun"
)

// TakeTokens takes up to want tokens from the token bucket called name, shared by every
// process on this database: the bucket holds at most burst tokens and refills at rate per
// second, by the database's clock. It returns how many it took (0 to want) and, when it took
// fewer, how long until the next token. A new bucket starts full.
func (s *Store) TakeTokens(ctx context.Context, name string, rate float64, burst, want int) (int, time.Duration, error) {
	if rate <= 0 || want <= 0 {
		return want, 0, nil
	}
	var took int
	var wait time.Duration
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		took, wait, _, err = s.takeTokens(ctx, tx, name, rate, burst, want)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return took, wait, nil
}

// takeTokens is TakeTokens inside the caller's transaction (a claim takes its dispatch tokens
// with the tasks, so both commit or neither), and also returns the bucket's time it took them at
// (by the database's clock). rate must be positive.
func (s *Store) takeTokens(ctx context.Context, tx bun.Tx, name string, rate float64, burst, want int) (int, time.Duration, time.Time, error) {
	if want <= 0 {
		return 0, 0, time.Time{}, nil
	}
	burst = max(burst, 1)
	var row struct {
		Tokens    float64   `bun:"tokens"`
		UpdatedAt time.Time `bun:"updated_at"`
		Now       time.Time `bun:"now"`
	}
	sel := "SELECT tokens, updated_at, " + s.nowSQL() + " AS now FROM courier_rate_limits WHERE name = ?"
	if s.pg {
		sel += " FOR UPDATE"
	}
	err := tx.NewRaw(sel, name).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		// A new bucket: create it full, then read it locked like any other (a concurrent
		// first taker created it meanwhile if the insert does nothing).
		_, err = tx.NewRaw("INSERT INTO courier_rate_limits (name, tokens, updated_at) VALUES (?, ?, "+s.nowSQL()+
			") ON CONFLICT (name) DO NOTHING", name, float64(burst)).Exec(ctx)
		if err != nil {
			return 0, 0, time.Time{}, err
		}
		err = tx.NewRaw(sel, name).Scan(ctx, &row)
	}
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	elapsed := max(row.Now.Sub(row.UpdatedAt).Seconds(), 0)
	tokens := math.Min(float64(burst), row.Tokens+elapsed*rate)
	took := min(want, int(math.Floor(tokens)))
	tokens -= float64(took)
	var wait time.Duration
	if took < want {
		wait = time.Duration((1 - (tokens - math.Floor(tokens))) / rate * float64(time.Second))
	}
	_, err = tx.NewRaw("UPDATE courier_rate_limits SET tokens = ?, updated_at = ? WHERE name = ?",
		tokens, s.timeArg(row.Now), name).Exec(ctx)
	return took, wait, row.Now, err
}

// giveBackTokens returns n tokens taken in this transaction and not spent, up to burst.
func (s *Store) giveBackTokens(ctx context.Context, tx bun.Tx, name string, burst, n int) error {
	if n <= 0 {
		return nil
	}
	least := "min"
	if s.pg {
		least = "least"
	}
	_, err := tx.NewRaw("UPDATE courier_rate_limits SET tokens = "+least+"(tokens + ?, ?) WHERE name = ?", float64(n), float64(max(burst, 1)), name).Exec(ctx)
	return err
}
