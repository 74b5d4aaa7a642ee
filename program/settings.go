package program

import (
	"fmt"

	"github.com/m2n-project/m2n/model/topo"
)

// Transports: how the executor moves a transfer between two ranks.
const (
	// TransportCopy: a device copy (peer copies over NVLink in one process,
	// CUDA IPC with one process per GPU, a plain copy in loopback).
	TransportCopy = "copy"
	// TransportNCCL: NCCL send/recv in groups (in loopback, a one-rank
	// communicator's self send/recv).
	TransportNCCL = "nccl"
	// TransportAuto, the default between GPUs: copies where they reach,
	// NCCL otherwise, as the executor finds on the machine. Before a
	// machine resolves it, it is modeled as NCCL, which reaches every pair.
	TransportAuto = "auto"
)

// Defaults of the executor.
const (
	// DefaultLanes is the streams per device for local ops and copies.
	DefaultLanes = 4
	// DefaultLoopbackComms is the one-rank NCCL communicators of loopback
	// with the NCCL transport (docs/native.md measures 1 to 8).
	DefaultLoopbackComms = 4
)

// Settings say how the GPU executor runs a schedule. The executor (native)
// runs with them, its model (sim) models them, and the command line maps
// its flags to them once; [Settings.Resolve] holds every default and rule.
type Settings struct {
	// Loopback: every rank on one GPU.
	Loopback bool
	// Launch: one process over all GPUs, or one process per GPU under a
	// launcher.
	Launch topo.Launch
	// Transport: TransportAuto, TransportCopy or TransportNCCL; "" is the
	// default (copy in loopback, auto between GPUs).
	Transport string
	// Lanes is the streams per device for local ops and copies; 0 means
	// DefaultLanes.
	Lanes int
	// WaveBytes caps the bytes one ordered pair carries in one NCCL group
	// when transfers pipeline through several: 0 chooses it from the
	// schedule, a negative value never cuts.
	WaveBytes int64
	// Comms is loopback's one-rank NCCL communicators; 0 means
	// DefaultLoopbackComms.
	Comms int
	// Graph replays each iteration as a CUDA graph: copies only (graphs of
	// NCCL send/recv failed or hung on two H200s, docs/native.md), so it
	// is dropped with NCCL, and refused there where GraphStrict says it
	// was asked for.
	Graph       bool
	GraphStrict bool
	// NoBatch launches every local op on its own rather than in batch
	// steps (to measure what batching buys; calibrate's benches).
	NoBatch bool
}

// SettingError is a setting Resolve refuses: its name ("transport",
// "graph", "lanes", "comms"), its value, and what it wants.
type SettingError struct {
	Setting, Value, Want string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("executor setting %s %q: %s", e.Setting, e.Value, e.Want)
}

// Resolve returns the settings with every default filled and every rule
// applied:
//   - the transport: copy (default) or nccl in loopback; auto (default),
//     copy or nccl between GPUs. Auto stays auto: the executor resolves it
//     on the machine and resolves the settings again;
//   - graphs replay copies only: with NCCL, Graph is dropped, or refused
//     where GraphStrict;
//   - Lanes and Comms: 0 is the default, a negative value an error.
func (s Settings) Resolve() (Settings, error) {
	switch {
	case s.Transport == "" && s.Loopback:
		s.Transport = TransportCopy
	case s.Transport == "":
		s.Transport = TransportAuto
	case s.Loopback && s.Transport != TransportCopy && s.Transport != TransportNCCL:
		return s, &SettingError{"transport", s.Transport, "want copy or nccl on one GPU (loopback)"}
	case !s.Loopback && s.Transport != TransportAuto && s.Transport != TransportCopy && s.Transport != TransportNCCL:
		return s, &SettingError{"transport", s.Transport, "want auto, nccl or copy"}
	}
	if s.Graph && s.Transport == TransportNCCL {
		if s.GraphStrict {
			return s, &SettingError{"graph", "true", "CUDA graphs of NCCL send/recv are not supported (on H200s with NCCL 2.28 the capture failed or hung): replay graphs with the copy transport"}
		}
		s.Graph = false
	}
	if s.Lanes < 0 {
		return s, &SettingError{"lanes", fmt.Sprint(s.Lanes), "want at least 1, or 0 for the default"}
	}
	if s.Lanes == 0 {
		s.Lanes = DefaultLanes
	}
	if s.Comms < 0 {
		return s, &SettingError{"comms", fmt.Sprint(s.Comms), "want at least 1, or 0 for the default"}
	}
	if s.Comms == 0 {
		s.Comms = DefaultLoopbackComms
	}
	return s, nil
}
