// Package campaign splits a campaign (the seeds of a simulation, the cells
// of a chaos run, the mutants of a kill matrix) into deterministic shards
// that separate machines run, and reads which shard a machine runs from a
// flag or from its environment: a GitHub Actions matrix sets
// OUTBOXLAB_SHARD, a Kubernetes Indexed Job sets JOB_COMPLETION_INDEX.
//
// A shard is a contiguous block of the campaign's cells in their order:
// shard K of N holds the cells from index floor((K-1)·n/N) up to, not
// including, floor(K·n/N). The blocks of 1/N .. N/N cover every cell once,
// their sizes differ by at most one, and a block of consecutive seeds is
// itself a run that one command replays (`--seeds M --seed F`).
package campaign

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Environment variables a shard is read from.
const (
	// EnvShard gives the shard as K/N, e.g. OUTBOXLAB_SHARD=2/3.
	EnvShard = "OUTBOXLAB_SHARD"
	// EnvShards is the number of shards N of a Kubernetes Indexed Job,
	// whose completion index EnvJobIndex picks the shard.
	EnvShards = "OUTBOXLAB_SHARDS"
	// EnvJobIndex is the 0-based completion index Kubernetes sets in each
	// pod of an Indexed Job; index i is shard i+1 of EnvShards.
	EnvJobIndex = "JOB_COMPLETION_INDEX"
)

// ErrInvalidShard is returned for a shard that is not K/N with
// 1 <= K <= N, or an environment that names one badly.
var ErrInvalidShard = errors.New("invalid shard")

// Shard is the K-th of N shares of a campaign. The zero value is the
// whole campaign, the same as 1/1.
type Shard struct {
	k, n int
}

// Whole is the campaign undivided: shard 1 of 1.
var Whole = Shard{}

// New returns shard k of n, or an error wrapping ErrInvalidShard unless
// 1 <= k <= n.
func New(k, n int) (Shard, error) {
	if n < 1 || k < 1 || k > n {
		return Shard{}, fmt.Errorf("%w: %d/%d: want K/N with 1 <= K <= N", ErrInvalidShard, k, n)
	}
	if n == 1 {
		return Whole, nil
	}
	return Shard{k: k, n: n}, nil
}

// Parse reads "K/N", e.g. "2/3".
func Parse(s string) (Shard, error) {
	ks, ns, ok := strings.Cut(strings.TrimSpace(s), "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil {
		return Shard{}, fmt.Errorf("%w: %q: want K/N, e.g. 2/3", ErrInvalidShard, s)
	}
	return New(k, n)
}

// K returns the shard's 1-based number.
func (s Shard) K() int { return max(s.k, 1) }

// N returns the number of shards.
func (s Shard) N() int { return max(s.n, 1) }

// IsWhole reports whether s is the whole campaign (1/1).
func (s Shard) IsWhole() bool { return s.N() == 1 }

// String returns "K/N".
func (s Shard) String() string { return strconv.Itoa(s.K()) + "/" + strconv.Itoa(s.N()) }

// Range returns the cells of a campaign of n cells (indexes 0 to n-1)
// that belong to s, as the half-open range [lo, hi). It is empty (lo ==
// hi) when there are fewer cells than shards and s gets none.
func (s Shard) Range(n int) (lo, hi int) {
	if n <= 0 {
		return 0, 0
	}
	return s.bound(s.K()-1, n), s.bound(s.K(), n)
}

// bound returns floor(i·n/N) without overflow (i <= N).
func (s Shard) bound(i, n int) int {
	h, l := bits.Mul64(uint64(i), uint64(n))
	q, _ := bits.Div64(h, l, uint64(s.N()))
	return int(q)
}

// Owns reports whether cell i of a campaign of n cells belongs to s.
func (s Shard) Owns(i, n int) bool {
	lo, hi := s.Range(n)
	return i >= lo && i < hi
}

// FromEnv reads the shard from the environment through getenv:
// EnvShard (K/N), else EnvJobIndex with EnvShards (index i of N is shard
// i+1 of N). It returns Whole when none is set. One of EnvJobIndex and
// EnvShards without the other is an error: a completion index alone
// would run the whole campaign in every pod of the job, and a number of
// shards alone says nothing of which one this is. The error names the
// variable at fault.
func FromEnv(getenv func(string) string) (Shard, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	if v := get(EnvShard); v != "" {
		s, err := Parse(v)
		if err != nil {
			return Shard{}, fmt.Errorf("%s: %w", EnvShard, err)
		}
		return s, nil
	}
	shards, index := get(EnvShards), get(EnvJobIndex)
	if shards == "" {
		if index != "" {
			return Shard{}, fmt.Errorf("%s=%s: %w: %s is not set: set it to the job's number of completions to split the campaign between its pods, "+
				"or set %s=K/N instead (without either, every pod would run the whole campaign)",
				EnvJobIndex, index, ErrInvalidShard, EnvShards, EnvShard)
		}
		return Whole, nil
	}
	n, err := strconv.Atoi(shards)
	if err != nil || n < 1 {
		return Shard{}, fmt.Errorf("%s: %w: %q: want the number of shards, at least 1", EnvShards, ErrInvalidShard, shards)
	}
	if index == "" {
		return Shard{}, fmt.Errorf("%s=%d: %w: %s is not set (it is the 0-based index of a Kubernetes Indexed Job); set %s=K/N instead",
			EnvShards, n, ErrInvalidShard, EnvJobIndex, EnvShard)
	}
	i, err := strconv.Atoi(index)
	if err != nil || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("%s: %w: %q: want an index from 0 to %d (%s=%d)", EnvJobIndex, ErrInvalidShard, index, n-1, EnvShards, n)
	}
	return New(i+1, n)
}

// Resolve returns the shard a flag gives ("" when the flag was not
// given), else the one of the environment (FromEnv): a flag wins over the
// environment.
func Resolve(flag string, getenv func(string) string) (Shard, error) {
	if strings.TrimSpace(flag) != "" {
		return Parse(flag)
	}
	return FromEnv(getenv)
}
