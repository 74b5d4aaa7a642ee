package scenario

import (
	"strings"

	"fmt"

	"github.com/BurntSushi/toml"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/units"
)

// File is a scenario document as written in TOML. docs/scenario.md is its
// reference; every field there maps to a field here by its toml tag.
type File struct {
	Name        string   `toml:"name"`
	Description string   `toml:"description"`
	Routes      []string `toml:"routes"` // routes to plan; empty means all
	// Chunk is the pipelining granularity of chunked routes ("4 MiB").
	Chunk *Size `toml:"chunk"`
	// StagingCap bounds each GPU's staging memory ("4 GiB"; "0 B": no
	// cap), as --staging-cap does; it sweeps like any other key.
	StagingCap *Size `toml:"staging_cap"`

	Topology   TopologySpec         `toml:"topology"`
	Meshes     map[string]*MeshSpec `toml:"meshes"`
	Tensors    []TensorSpec         `toml:"tensors"`
	Workload   *WorkloadSpec        `toml:"workload"`
	Sweeps     []SweepSpec          `toml:"sweep"`
	References []ReferenceSpec      `toml:"reference"`
}

// TopologySpec picks a preset and overrides its constants. Unset fields keep
// the preset's value.
type TopologySpec struct {
	Preset           string           `toml:"preset"`
	Domains          *int             `toml:"domains"`
	GPUsPerDomain    *int             `toml:"gpus_per_domain"`
	NVLink           *units.Bandwidth `toml:"nvlink"`
	NVLinkLine       *units.Bandwidth `toml:"nvlink_line"`
	NICsPerGPU       *int             `toml:"nics_per_gpu"`
	NIC              *units.Bandwidth `toml:"nic"`
	NICLine          *units.Bandwidth `toml:"nic_line"`
	Memory           *units.Bandwidth `toml:"memory"`
	GPUMemory        *Size            `toml:"gpu_memory"`
	Oversubscription *float64         `toml:"oversubscription"`
	LatencyNVLink    *units.Time      `toml:"latency_nvlink"`
	LatencyNet       *units.Time      `toml:"latency_net"`
	LatencyLocal     *units.Time      `toml:"latency_local"`
	Placement        *PlacementSpec   `toml:"placement"`
	Executor         *ExecutorSpec    `toml:"executor"`
}

// ExecutorSpec sets the GPU executor's measured costs (topo.Executor),
// per launch mode; unset fields keep the preset's value.
type ExecutorSpec struct {
	PackLong    *float64       `toml:"pack_long"`
	PackShort   *float64       `toml:"pack_short"`
	PackStage   *float64       `toml:"pack_stage"`
	Quantize    *float64       `toml:"quantize"`
	QuantizeGen *float64       `toml:"quantize_generic"`
	QuantizeRow *float64       `toml:"quantize_rows"`
	QuantizeSpl *float64       `toml:"quantize_split"`
	BatchShared *float64       `toml:"batch_shared"`
	CopyShared  *float64       `toml:"copy_shared"`
	NCCLBeside  *float64       `toml:"nccl_beside"`
	BesideBatch *float64       `toml:"nccl_beside_batch"`
	OneProcess  *ExecCostsSpec `toml:"one_process"`
	PerGPU      *ExecCostsSpec `toml:"per_gpu"`
}

// ExecCostsSpec is one launch mode's costs (topo.ExecCosts).
type ExecCostsSpec struct {
	PairRate     *units.Bandwidth `toml:"pair_rate"`
	DuplexRate   *units.Bandwidth `toml:"duplex_rate"`
	CopyRate     *units.Bandwidth `toml:"copy_rate"`
	XferLatency  *units.Time      `toml:"xfer_latency"`
	GroupLatency *units.Time      `toml:"group_latency"`
	DuplexStart  *units.Time      `toml:"duplex_start"`
	DuplexSmall  *units.Time      `toml:"duplex_start_small"`
	DuplexOpLat  *units.Time      `toml:"duplex_op_latency"`
	DuplexOpRate *units.Bandwidth `toml:"duplex_op_rate"`
	HostGroup    *units.Time      `toml:"host_group"`
	HostXfer     *units.Time      `toml:"host_xfer"`
	HostLaunch   *units.Time      `toml:"host_launch"`
	HostEvent    *units.Time      `toml:"host_event"`
	StartLatency *units.Time      `toml:"start_latency"`
	BoxLatency   *units.Time      `toml:"box_latency"`
	RampBytes    []string         `toml:"ramp_bytes"`
	RampExtra    []string         `toml:"ramp_extra"`
}

// PlacementSpec places ranks on GPUs explicitly: rank Ranks[i] runs on GPU
// GPUs[i]. Ranks not listed run on the GPU of their own number.
type PlacementSpec struct {
	Ranks RankList `toml:"ranks"`
	GPUs  RankList `toml:"gpus"`
}

// MeshSpec is a named mesh: its shape, and its ranks either listed
// ("0-15", "16-79,96", or an array) or as a contiguous run from FirstRank.
type MeshSpec struct {
	Shape     []int    `toml:"shape"`
	Ranks     RankList `toml:"ranks"`
	FirstRank *int     `toml:"first_rank"`
}

// TensorSpec is one tensor to move.
type TensorSpec struct {
	Name  string     `toml:"name"`
	Shape []int64    `toml:"shape"`
	DType string     `toml:"dtype"`
	Src   LayoutSpec `toml:"src"`
	Dst   LayoutSpec `toml:"dst"`
	QuantSpec
}

// QuantSpec asks for a quantized destination ([[tensors]] and [workload]):
// dst_dtype = "fp8_e4m3", with scales per block (block = [rows, cols],
// default [128, 128]), per channel or per tensor.
type QuantSpec struct {
	DstDType *string `toml:"dst_dtype"` // "fp8_e4m3"; absent: the source dtype
	Scales   string  `toml:"scales"`    // "block" (default), "channel", "tensor", "shard"
	Block    []int64 `toml:"block"`     // block scales: [rows, cols]
}

// LayoutSpec is a tensor's layout on one side: a mesh, by name (Mesh) or
// inline (Shape with Ranks or FirstRank), and its placements written as in
// DTensor, e.g. ["R", "S(1)"].
type LayoutSpec struct {
	Mesh       string   `toml:"mesh"`
	Shape      []int    `toml:"shape"`
	Ranks      RankList `toml:"ranks"`
	FirstRank  *int     `toml:"first_rank"`
	Placements []string `toml:"placements"`
}

// WorkloadSpec is a whole-model refit: a model, its dtype, the trainer's and
// the generator's parallel layouts, and the bucket size for replicated
// tensors. docs/scenario.md and docs/workloads.md describe every field.
type WorkloadSpec struct {
	Model     string         `toml:"model"`  // a built-in model name or a config.json path, resolved by the caller's loader
	DType     string         `toml:"dtype"`  // every weight's dtype
	Bucket    *Size          `toml:"bucket"` // replicated tensors are packed into buckets of this size; "0 B" turns it off
	Trainer   *TrainerSpec   `toml:"trainer"`
	Generator *GeneratorSpec `toml:"generator"`
	MTP       bool           `toml:"mtp"` // move the multi-token-prediction layers too
	// Layers moves only the model's first decoder layers (with its
	// embedding, head and final norm): the model's own shapes at a size a
	// small machine holds.
	Layers *int `toml:"layers"`
	// Framework is the frameworks' own costs around the transfer, as the
	// user measured them; absent: none modeled.
	Framework *FrameworkSpec `toml:"framework"`
	QuantSpec
}

// FrameworkSpec is [workload.framework]: what the trainer pays to export
// its weights and the generator to load them, per tensor and per GiB of
// each rank's share, as the user measured them on their framework. Every
// cost is 0 unless given.
type FrameworkSpec struct {
	ExportPerTensor *units.Time `toml:"export_per_tensor"`
	ExportPerGiB    *units.Time `toml:"export_per_gib"`
	LoadPerTensor   *units.Time `toml:"load_per_tensor"`
	LoadPerGiB      *units.Time `toml:"load_per_gib"`
}

// TrainerSpec is a Megatron-LM trainer's layout. Unset sizes are 1, except
// etp (Megatron's default: tp) and dp (from the rank count).
type TrainerSpec struct {
	Framework string   `toml:"framework"` // "megatron"
	TP        *int     `toml:"tp"`
	PP        *int     `toml:"pp"`
	EP        *int     `toml:"ep"`
	ETP       *int     `toml:"etp"`
	CP        *int     `toml:"cp"`
	DP        *int     `toml:"dp"`
	Stages    []int    `toml:"stages"` // decoder layers per pipeline stage
	Ranks     RankList `toml:"ranks"`
	FirstRank *int     `toml:"first_rank"`
}

// GeneratorSpec is a vLLM generator's layout.
type GeneratorSpec struct {
	Framework string   `toml:"framework"` // "vllm"
	TP        *int     `toml:"tp"`
	DP        *int     `toml:"dp"`
	EP        *int     `toml:"ep"` // 1, or tp x dp for vLLM's expert parallelism
	Ranks     RankList `toml:"ranks"`
	FirstRank *int     `toml:"first_rank"`
}

// SweepSpec varies scenario keys over a list of points. With Key set, Values
// are assigned to that key; with Set, each listed key takes its i-th value at
// point i, and Values are the x-axis values (numbers) that name the points.
// Several sweeps form their cartesian product.
type SweepSpec struct {
	Name string `toml:"name"`
	// Label names the axis in charts and reports ("generator GPUs (the
	// trainer grows too)"); default: the name.
	Label  string                      `toml:"label"`
	Key    string                      `toml:"key"`
	Values []toml.Primitive            `toml:"values"`
	Set    map[string][]toml.Primitive `toml:"set"`
}

// ReferenceSpec is a measured time to show beside the model: for one route
// at one sweep point.
type ReferenceSpec struct {
	Route  string         `toml:"route"`
	Point  map[string]any `toml:"point"`
	TimeMS float64        `toml:"time_ms"`
	Source string         `toml:"source"`
	Note   string         `toml:"note"`
}

// Size is a size in bytes, written with its unit: "4 MiB", "0 B". A bare
// number, or a string without a unit, is an error (docs/scenario.md).
type Size units.Bytes

// UnmarshalTOML reads a string with a unit.
func (z *Size) UnmarshalTOML(v any) error {
	str, ok := v.(string)
	if t := strings.TrimSpace(str); !ok || t == "" || strings.ContainsRune("0123456789.", rune(t[len(t)-1])) {
		return fmt.Errorf("size %v: a bare number; give a unit, as in \"4 MiB\" or \"0 B\"", v)
	}
	b, err := units.ParseBytes(str)
	if err != nil {
		return err
	}
	*z = Size(b)
	return nil
}

// RankList is a list of global ranks, written as a string of ranges
// ("0-15,72") or an array of integers.
type RankList []int

// UnmarshalTOML reads a string or an integer array.
func (r *RankList) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case string:
		rs, err := layout.ParseRanks(x)
		if err != nil {
			return err
		}
		*r = rs
		return nil
	case []any:
		out := make([]int, len(x))
		for i, e := range x {
			n, ok := e.(int64)
			if !ok || n < 0 || n >= layout.MaxRank {
				return fmt.Errorf("rank list element %d = %v: want a rank in [0, %d)", i, e, layout.MaxRank)
			}
			out[i] = int(n)
		}
		*r = out
		return nil
	}
	return fmt.Errorf("rank list %v: want a string such as \"0-15,72\" or an array of integers", v)
}
