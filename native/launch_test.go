package native

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDetectLaunch(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want *LaunchEnv
		err  string
	}{
		{"none", map[string]string{}, nil, ""},
		{"torchrun", map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
			&LaunchEnv{Launcher: "torchrun", Rank: 3, World: 8, LocalRank: 3, MasterAddr: "10.0.0.1", MasterPort: 29500}, ""},
		{"slurm with NCCL_COMM_ID", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "NCCL_COMM_ID": "node1:4000"},
			&LaunchEnv{Launcher: "slurm", Rank: 1, World: 2, LocalRank: 1, NCCLCommID: "node1:4000"}, ""},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
			&LaunchEnv{Launcher: "openmpi", Rank: 0, World: 1, LocalRank: 0}, ""},
		{"partial", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, nil, "RANK and WORLD_SIZE set but LOCAL_RANK is not"},
		{"rank alone", map[string]string{"RANK": "0"}, nil, "RANK set but WORLD_SIZE and LOCAL_RANK are not"},
		{"local rank alone", map[string]string{"LOCAL_RANK": "1"}, nil, "LOCAL_RANK set but RANK and WORLD_SIZE are not"},
		{"malformed", map[string]string{"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, nil, `RANK="x"`},
		{"rank outside world", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "NCCL_COMM_ID": "a:1"}, nil, "rank 2 is not in a world of 2"},
		{"no rendezvous", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, nil, "MASTER_ADDR and MASTER_PORT"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, nil, `MASTER_PORT="99999"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectLaunch(envOf(tc.env))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP here:", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Rank 0 serves the id; every other rank gets exactly it.
func TestRendezvous(t *testing.T) {
	addr := freeAddr(t)
	id := bytes.Repeat([]byte{7, 1, 3}, 43)[:128]
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	got := make([][]byte, 3)
	for r := 1; r <= 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := FetchID(addr, 128, 10*time.Second)
			got[r-1] = b
			errs <- err
		}()
	}
	if err := ServeID(addr, id, 4, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r, b := range got {
		if !bytes.Equal(b, id) {
			t.Errorf("rank %d got a different id", r+1)
		}
	}
}

// A peer that never arrives is a timeout, never a hang.
func TestRendezvousTimeouts(t *testing.T) {
	addr := freeAddr(t)
	start := time.Now()
	err := ServeID(addr, make([]byte, 128), 3, 300*time.Millisecond)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "1 of 3 ranks") {
		t.Errorf("ServeID with missing peers: %v", err)
	}
	_, err = FetchID(freeAddr(t), 128, 300*time.Millisecond)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("FetchID with no rank 0: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("timeouts took %v", el)
	}
}
