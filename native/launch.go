package native

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// LaunchEnv is this process's place in a multi-process run: its rank, the
// world size, the local GPU, and how ranks agree on an NCCL unique id.
type LaunchEnv struct {
	Launcher  string // "torchrun", "slurm", "openmpi" or "mpich"
	Rank      int
	World     int
	LocalRank int
	// OneHost: the launcher says every process runs on this host
	// (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS
	// equal to the world, or SLURM_JOB_NUM_NODES=1), so CUDA IPC reaches
	// every peer.
	OneHost bool
	// Rendezvous: rank 0 serves the NCCL unique id on MasterAddr:MasterPort
	// and every other rank fetches it; unless NCCLCommID is set, in which
	// case NCCL bootstraps there itself and nothing is exchanged.
	MasterAddr string
	MasterPort int
	NCCLCommID string
}

// DetectLaunch reads the launcher's environment: torchrun (RANK,
// WORLD_SIZE, LOCAL_RANK), Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID), Open MPI (OMPI_COMM_WORLD_*), MPICH (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID), in that order. It returns nil when none is set and an
// error naming the variable when a set is partial or malformed.
// MASTER_ADDR and MASTER_PORT (or NCCL_COMM_ID) give the rendezvous;
// M2N_RENDEZVOUS_PORT overrides the port (under torchrun, whose own store
// listens on MASTER_PORT).
func DetectLaunch(getenv func(string) string) (*LaunchEnv, error) {
	sets := []struct {
		name               string
		rank, world, local string
		localWorld         string // processes on this host
	}{
		{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
		{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	}
	for _, s := range sets {
		vals := []string{getenv(s.rank), getenv(s.world), getenv(s.local)}
		set := 0
		for _, v := range vals {
			if v != "" {
				set++
			}
		}
		if set == 0 {
			continue
		}
		names := []string{s.rank, s.world, s.local}
		if set != 3 {
			var have, missing []string
			for i, v := range vals {
				if v == "" {
					missing = append(missing, names[i])
				} else {
					have = append(have, names[i])
				}
			}
			verb := "is"
			if len(missing) > 1 {
				verb = "are"
			}
			return nil, fmt.Errorf("launcher %s: %s set but %s %s not: set all three, or none", s.name, strings.Join(have, " and "), strings.Join(missing, " and "), verb)
		}
		var nums [3]int
		for i, v := range vals {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("launcher %s: %s=%q is not a non-negative integer", s.name, names[i], v)
			}
			nums[i] = n
		}
		e := &LaunchEnv{Launcher: s.name, Rank: nums[0], World: nums[1], LocalRank: nums[2]}
		if e.World < 1 || e.Rank >= e.World {
			return nil, fmt.Errorf("launcher %s: rank %d is not in a world of %d", s.name, e.Rank, e.World)
		}
		if s.localWorld != "" {
			e.OneHost = getenv(s.localWorld) == strconv.Itoa(e.World)
		} else {
			e.OneHost = getenv("SLURM_JOB_NUM_NODES") == "1"
		}
		e.NCCLCommID = getenv("NCCL_COMM_ID")
		e.MasterAddr = getenv("MASTER_ADDR")
		port := getenv("MASTER_PORT")
		if p := getenv("M2N_RENDEZVOUS_PORT"); p != "" {
			// torchrun's own store holds MASTER_PORT: m2n may need another.
			port = p
		}
		if p := port; p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 || n > 65535 {
				return nil, fmt.Errorf("MASTER_PORT=%q is not a port", p)
			}
			e.MasterPort = n
		}
		if e.NCCLCommID == "" && (e.MasterAddr == "" || e.MasterPort == 0) && e.World > 1 {
			return nil, fmt.Errorf("launcher %s: set MASTER_ADDR and MASTER_PORT (rank 0's address) or NCCL_COMM_ID for the NCCL rendezvous", s.name)
		}
		return e, nil
	}
	return nil, nil
}

// DetectLaunchEnv is DetectLaunch over the process environment.
func DetectLaunchEnv() (*LaunchEnv, error) { return DetectLaunch(os.Getenv) }

// idMagic starts every rendezvous message.
var idMagic = []byte("m2n-nccl-id-v1\n")

// ErrTimeout is returned when a peer does not arrive in time.
var ErrTimeout = errors.New("native: timed out waiting for a peer")

// ServeID serves id (NCCL's 128-byte unique id) to world-1 peers on addr
// (host:port), and returns when all have fetched it or timeout passes.
func ServeID(addr string, id []byte, world int, timeout time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rendezvous: listening on %s: %w", addr, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	for served := 1; served < world; served++ {
		ln.(*net.TCPListener).SetDeadline(deadline)
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("%w: %d of %d ranks fetched the NCCL id from %s within %v", ErrTimeout, served, world, addr, timeout)
			}
			return fmt.Errorf("rendezvous: %w", err)
		}
		c.SetDeadline(deadline)
		_, werr := c.Write(append(append([]byte(nil), idMagic...), id...))
		c.Close()
		if werr != nil {
			return fmt.Errorf("rendezvous: sending the id: %w", werr)
		}
	}
	return nil
}

// FetchID fetches the NCCL unique id from rank 0 at addr, retrying until
// timeout while rank 0 is not yet listening.
func FetchID(addr string, n int, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(deadline)
			buf, rerr := io.ReadAll(io.LimitReader(c, int64(len(idMagic)+n)))
			c.Close()
			if rerr != nil {
				return nil, fmt.Errorf("rendezvous: reading the id from %s: %w", addr, rerr)
			}
			if len(buf) != len(idMagic)+n || !bytes.HasPrefix(buf, idMagic) {
				return nil, fmt.Errorf("rendezvous: %s did not answer with an m2n NCCL id", addr)
			}
			return buf[len(idMagic):], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: rank 0 at %s did not answer within %v (%v)", ErrTimeout, addr, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
