//go:build linux && cgo

// The C layer of package native: dlopen, dlsym and one-line trampolines.
#include "m2n_cuda.h"
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// Only the prototypes m2n calls, with plain C types, bound with dlsym at
// open time: the binary builds and runs without the CUDA toolkit, and a
// missing symbol is a load error rather than a crash.

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUgraph;
typedef void* CUgraphExec;

void* m2n_cuda;
void* m2n_nvrtc;
void* m2n_nccl;

#define FN(ret, name, args) static ret (*p_##name) args;
FN(CUresult, cuInit, (unsigned))
FN(CUresult, cuDriverGetVersion, (int*))
FN(CUresult, cuDeviceGetCount, (int*))
FN(CUresult, cuDeviceGet, (CUdevice*, int))
FN(CUresult, cuDeviceGetAttribute, (int*, int, CUdevice))
FN(CUresult, cuDeviceGetName, (char*, int, CUdevice))
FN(CUresult, cuDeviceTotalMem, (size_t*, CUdevice))
FN(CUresult, cuDeviceGetPCIBusId, (char*, int, CUdevice))
FN(CUresult, cuDevicePrimaryCtxRetain, (CUcontext*, CUdevice))
FN(CUresult, cuDevicePrimaryCtxRelease, (CUdevice))
FN(CUresult, cuCtxSetCurrent, (CUcontext))
FN(CUresult, cuCtxEnablePeerAccess, (CUcontext, unsigned))
typedef struct { char reserved[64]; } m2nIpcHandle;
FN(CUresult, cuIpcGetMemHandle, (m2nIpcHandle*, CUdeviceptr))
FN(CUresult, cuIpcOpenMemHandle, (CUdeviceptr*, m2nIpcHandle, unsigned))
FN(CUresult, cuIpcCloseMemHandle, (CUdeviceptr))
FN(CUresult, cuDeviceCanAccessPeer, (int*, CUdevice, CUdevice))
FN(CUresult, cuCtxSynchronize, (void))
FN(CUresult, cuMemAlloc, (CUdeviceptr*, size_t))
FN(CUresult, cuMemFree, (CUdeviceptr))
FN(CUresult, cuMemGetInfo, (size_t*, size_t*))
FN(CUresult, cuMemcpyHtoD, (CUdeviceptr, const void*, size_t))
FN(CUresult, cuMemcpyDtoH, (void*, CUdeviceptr, size_t))
FN(CUresult, cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))
FN(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))
FN(CUresult, cuStreamWriteValue32, (CUstream, CUdeviceptr, unsigned, unsigned))
FN(CUresult, cuStreamCreate, (CUstream*, unsigned))
FN(CUresult, cuStreamDestroy, (CUstream))
FN(CUresult, cuStreamSynchronize, (CUstream))
FN(CUresult, cuStreamQuery, (CUstream))
FN(CUresult, cuStreamWaitEvent, (CUstream, CUevent, unsigned))
FN(CUresult, cuEventCreate, (CUevent*, unsigned))
FN(CUresult, cuEventRecord, (CUevent, CUstream))
FN(CUresult, cuEventRecordWithFlags, (CUevent, CUstream, unsigned))
FN(CUresult, cuEventSynchronize, (CUevent))
FN(CUresult, cuEventDestroy, (CUevent))
FN(CUresult, cuEventElapsedTime, (float*, CUevent, CUevent))
FN(CUresult, cuModuleLoadData, (CUmodule*, const void*))
FN(CUresult, cuModuleGetFunction, (CUfunction*, CUmodule, const char*))
FN(CUresult, cuModuleUnload, (CUmodule))
FN(CUresult, cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**))
FN(CUresult, cuGetErrorName, (CUresult, const char**))
FN(CUresult, cuGetErrorString, (CUresult, const char**))
FN(CUresult, cuStreamBeginCapture, (CUstream, int))
FN(CUresult, cuStreamEndCapture, (CUstream, CUgraph*))
FN(CUresult, cuGraphInstantiateWithFlags, (CUgraphExec*, CUgraph, unsigned long long))
FN(CUresult, cuGraphLaunch, (CUgraphExec, CUstream))
FN(CUresult, cuGraphExecDestroy, (CUgraphExec))
FN(CUresult, cuGraphDestroy, (CUgraph))

typedef int nvrtcResult;
typedef void* nvrtcProgram;
FN(nvrtcResult, nvrtcVersion, (int*, int*))
FN(nvrtcResult, nvrtcCreateProgram, (nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*))
FN(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram, int, const char* const*))
FN(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram, size_t*))
FN(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram, char*))
FN(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t*))
FN(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char*))
FN(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram*))
FN(const char*, nvrtcGetErrorString, (nvrtcResult))

typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
// The prefix of ncclConfig_t (2.14+) that m2n sets; NCCL copies `size`
// bytes over its defaults. cgaClusterSize fills what would be padding.
typedef struct { size_t size; unsigned magic; unsigned version; int blocking; int cgaClusterSize; } m2nNcclConfig;
FN(ncclResult_t, ncclGetVersion, (int*))
FN(ncclResult_t, ncclCommCount, (ncclComm_t, int*))
FN(ncclResult_t, ncclCommUserRank, (ncclComm_t, int*))
FN(ncclResult_t, ncclCommCuDevice, (ncclComm_t, int*))
FN(ncclResult_t, ncclGetUniqueId, (ncclUniqueId*))
FN(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t*, int, ncclUniqueId, int, m2nNcclConfig*))
FN(ncclResult_t, ncclCommInitAll, (ncclComm_t*, int, const int*))
FN(ncclResult_t, ncclCommDestroy, (ncclComm_t))
FN(ncclResult_t, ncclCommAbort, (ncclComm_t))
FN(ncclResult_t, ncclCommSplit, (ncclComm_t, int, int, ncclComm_t*, m2nNcclConfig*))
FN(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t, ncclResult_t*))
FN(ncclResult_t, ncclSend, (const void*, size_t, int, int, ncclComm_t, CUstream))
FN(ncclResult_t, ncclAllGather, (const void*, void*, size_t, int, ncclComm_t, CUstream))
FN(ncclResult_t, ncclRecv, (void*, size_t, int, int, ncclComm_t, CUstream))
FN(ncclResult_t, ncclGroupStart, (void))
FN(ncclResult_t, ncclGroupEnd, (void))
FN(const char*, ncclGetErrorString, (ncclResult_t))
FN(const char*, ncclGetLastError, (ncclComm_t))

// m2n_open opens a library; on failure, writes dlerror() to err.
void* m2n_open(const char* path, char* err, int n) {
	void* h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h) { const char* e = dlerror(); strncpy(err, e ? e : "unknown error", n - 1); err[n - 1] = 0; }
	return h;
}

// m2n_open_loaded returns a library this process has already loaded
// (RTLD_NOLOAD), or 0 with dlerror() in err.
void* m2n_open_loaded(const char* path, char* err, int n) {
	void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (!h) { const char* e = dlerror(); strncpy(err, e ? e : "not loaded", n - 1); err[n - 1] = 0; }
	return h;
}

// SYM binds p_name to the first of the names that the library has.
#define SYM(lib, name, ...) do { \
	const char* names[] = { __VA_ARGS__, 0 }; \
	p_##name = 0; \
	for (int i = 0; names[i] && !p_##name; i++) *(void**)(&p_##name) = dlsym(lib, names[i]); \
	if (!p_##name) { strncpy(missing, #name, n - 1); missing[n - 1] = 0; return -1; } \
} while (0)

int m2n_bind_cuda(void* h, char* missing, int n) {
	m2n_cuda = h;
	SYM(h, cuInit, "cuInit");
	SYM(h, cuDriverGetVersion, "cuDriverGetVersion");
	SYM(h, cuDeviceGetCount, "cuDeviceGetCount");
	SYM(h, cuDeviceGet, "cuDeviceGet");
	SYM(h, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(h, cuDeviceGetName, "cuDeviceGetName");
	SYM(h, cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(h, cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId");
	SYM(h, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(h, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM(h, cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(h, cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess");
	SYM(h, cuIpcGetMemHandle, "cuIpcGetMemHandle");
	SYM(h, cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle");
	SYM(h, cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
	SYM(h, cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer");
	SYM(h, cuCtxSynchronize, "cuCtxSynchronize");
	SYM(h, cuMemAlloc, "cuMemAlloc_v2");
	SYM(h, cuMemFree, "cuMemFree_v2");
	SYM(h, cuMemGetInfo, "cuMemGetInfo_v2");
	SYM(h, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(h, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(h, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(h, cuMemsetD8Async, "cuMemsetD8Async");
	SYM(h, cuStreamWriteValue32, "cuStreamWriteValue32_v2", "cuStreamWriteValue32");
	SYM(h, cuStreamCreate, "cuStreamCreate");
	SYM(h, cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(h, cuStreamSynchronize, "cuStreamSynchronize");
	SYM(h, cuStreamQuery, "cuStreamQuery");
	SYM(h, cuStreamWaitEvent, "cuStreamWaitEvent");
	SYM(h, cuEventCreate, "cuEventCreate");
	SYM(h, cuEventRecord, "cuEventRecord");
	SYM(h, cuEventRecordWithFlags, "cuEventRecordWithFlags");
	SYM(h, cuEventSynchronize, "cuEventSynchronize");
	SYM(h, cuEventDestroy, "cuEventDestroy_v2");
	SYM(h, cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	SYM(h, cuModuleLoadData, "cuModuleLoadData");
	SYM(h, cuModuleGetFunction, "cuModuleGetFunction");
	SYM(h, cuModuleUnload, "cuModuleUnload");
	SYM(h, cuLaunchKernel, "cuLaunchKernel");
	SYM(h, cuGetErrorName, "cuGetErrorName");
	SYM(h, cuGetErrorString, "cuGetErrorString");
	SYM(h, cuStreamBeginCapture, "cuStreamBeginCapture_v2");
	SYM(h, cuStreamEndCapture, "cuStreamEndCapture");
	SYM(h, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	SYM(h, cuGraphLaunch, "cuGraphLaunch");
	SYM(h, cuGraphExecDestroy, "cuGraphExecDestroy");
	SYM(h, cuGraphDestroy, "cuGraphDestroy");
	return 0;
}

int m2n_bind_nvrtc(void* h, char* missing, int n) {
	m2n_nvrtc = h;
	SYM(h, nvrtcVersion, "nvrtcVersion");
	SYM(h, nvrtcCreateProgram, "nvrtcCreateProgram");
	SYM(h, nvrtcCompileProgram, "nvrtcCompileProgram");
	SYM(h, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
	SYM(h, nvrtcGetProgramLog, "nvrtcGetProgramLog");
	SYM(h, nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
	SYM(h, nvrtcGetCUBIN, "nvrtcGetCUBIN");
	SYM(h, nvrtcDestroyProgram, "nvrtcDestroyProgram");
	SYM(h, nvrtcGetErrorString, "nvrtcGetErrorString");
	return 0;
}

int m2n_bind_nccl(void* h, char* missing, int n) {
	m2n_nccl = h;
	SYM(h, ncclGetVersion, "ncclGetVersion");
	SYM(h, ncclCommCount, "ncclCommCount");
	SYM(h, ncclCommUserRank, "ncclCommUserRank");
	SYM(h, ncclCommCuDevice, "ncclCommCuDevice");
	SYM(h, ncclGetUniqueId, "ncclGetUniqueId");
	SYM(h, ncclCommInitRankConfig, "ncclCommInitRankConfig");
	SYM(h, ncclCommInitAll, "ncclCommInitAll");
	SYM(h, ncclCommDestroy, "ncclCommDestroy");
	SYM(h, ncclCommAbort, "ncclCommAbort");
	SYM(h, ncclCommSplit, "ncclCommSplit");
	SYM(h, ncclCommGetAsyncError, "ncclCommGetAsyncError");
	SYM(h, ncclSend, "ncclSend");
	SYM(h, ncclAllGather, "ncclAllGather");
	SYM(h, ncclRecv, "ncclRecv");
	SYM(h, ncclGroupStart, "ncclGroupStart");
	SYM(h, ncclGroupEnd, "ncclGroupEnd");
	SYM(h, ncclGetErrorString, "ncclGetErrorString");
	SYM(h, ncclGetLastError, "ncclGetLastError");
	return 0;
}

// Trampolines: Go calls these; handles travel as uintptr_t, device
// addresses as unsigned long long.
typedef unsigned long long ull;
typedef unsigned long uptr;

CUresult m2n_cuInit(void) { return p_cuInit(0); }
CUresult m2n_cuDriverGetVersion(int* v) { return p_cuDriverGetVersion(v); }
CUresult m2n_cuDeviceGetCount(int* n) { return p_cuDeviceGetCount(n); }
CUresult m2n_cuDeviceGet(int* d, int ord) { return p_cuDeviceGet(d, ord); }
CUresult m2n_cuDeviceGetAttribute(int* v, int attr, int d) { return p_cuDeviceGetAttribute(v, attr, d); }
CUresult m2n_cuDeviceGetName(char* s, int n, int d) { return p_cuDeviceGetName(s, n, d); }
CUresult m2n_cuDeviceTotalMem(size_t* b, int d) { return p_cuDeviceTotalMem(b, d); }
CUresult m2n_cuDeviceGetPCIBusId(char* s, int n, int d) { return p_cuDeviceGetPCIBusId(s, n, d); }
CUresult m2n_cuDevicePrimaryCtxRetain(uptr* ctx, int d) { return p_cuDevicePrimaryCtxRetain((CUcontext*)ctx, d); }
CUresult m2n_cuDevicePrimaryCtxRelease(int d) { return p_cuDevicePrimaryCtxRelease(d); }
CUresult m2n_cuCtxSetCurrent(uptr ctx) { return p_cuCtxSetCurrent((CUcontext)ctx); }
CUresult m2n_cuCtxEnablePeerAccess(uptr peer) { return p_cuCtxEnablePeerAccess((CUcontext)peer, 0); }
CUresult m2n_cuIpcGetMemHandle(char* out, ull p) { m2nIpcHandle h; CUresult r = p_cuIpcGetMemHandle(&h, (CUdeviceptr)p); memcpy(out, h.reserved, 64); return r; }
CUresult m2n_cuIpcOpenMemHandle(ull* p, const char* in) { m2nIpcHandle h; memcpy(h.reserved, in, 64); return p_cuIpcOpenMemHandle((CUdeviceptr*)p, h, 1); } // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
CUresult m2n_cuIpcCloseMemHandle(ull p) { return p_cuIpcCloseMemHandle((CUdeviceptr)p); }
CUresult m2n_cuDeviceCanAccessPeer(int* can, int d, int peer) { return p_cuDeviceCanAccessPeer(can, d, peer); }
CUresult m2n_cuCtxSynchronize(void) { return p_cuCtxSynchronize(); }
CUresult m2n_cuMemAlloc(ull* p, size_t n) { return p_cuMemAlloc((CUdeviceptr*)p, n); }
CUresult m2n_cuMemFree(ull p) { return p_cuMemFree(p); }
CUresult m2n_cuMemGetInfo(size_t* f, size_t* t) { return p_cuMemGetInfo(f, t); }
CUresult m2n_cuMemcpyHtoD(ull d, const void* h, size_t n) { return p_cuMemcpyHtoD(d, h, n); }
CUresult m2n_cuMemcpyDtoH(void* h, ull d, size_t n) { return p_cuMemcpyDtoH(h, d, n); }
CUresult m2n_cuMemcpyDtoDAsync(ull d, ull s, size_t n, uptr st) { return p_cuMemcpyDtoDAsync(d, s, n, (CUstream)st); }
CUresult m2n_cuMemsetD8Async(ull d, unsigned char v, size_t n, uptr st) { return p_cuMemsetD8Async(d, v, n, (CUstream)st); }
// CU_STREAM_WRITE_VALUE_DEFAULT (0): the write is fenced after the
// stream's earlier writes.
CUresult m2n_cuStreamWriteValue32(uptr st, ull addr, unsigned v) { return p_cuStreamWriteValue32((CUstream)st, addr, v, 0); }
CUresult m2n_cuStreamCreate(uptr* s) { return p_cuStreamCreate((CUstream*)s, 1); } // non-blocking
CUresult m2n_cuStreamDestroy(uptr s) { return p_cuStreamDestroy((CUstream)s); }
CUresult m2n_cuStreamSynchronize(uptr s) { return p_cuStreamSynchronize((CUstream)s); }
CUresult m2n_cuStreamQuery(uptr s) { return p_cuStreamQuery((CUstream)s); }
CUresult m2n_cuStreamWaitEvent(uptr s, uptr e) { return p_cuStreamWaitEvent((CUstream)s, (CUevent)e, 0); }
CUresult m2n_cuEventCreate(uptr* e, unsigned flags) { return p_cuEventCreate((CUevent*)e, flags); }
CUresult m2n_cuEventRecord(uptr e, uptr s) { return p_cuEventRecord((CUevent)e, (CUstream)s); }
/* CU_EVENT_RECORD_EXTERNAL (1): in a stream capture, an event record node. */
CUresult m2n_cuEventRecordExternal(uptr e, uptr s) { return p_cuEventRecordWithFlags((CUevent)e, (CUstream)s, 1); }
CUresult m2n_cuEventSynchronize(uptr e) { return p_cuEventSynchronize((CUevent)e); }
CUresult m2n_cuEventDestroy(uptr e) { return p_cuEventDestroy((CUevent)e); }
CUresult m2n_cuEventElapsedTime(float* ms, uptr a, uptr b) { return p_cuEventElapsedTime(ms, (CUevent)a, (CUevent)b); }
CUresult m2n_cuModuleLoadData(uptr* m, const void* img) { return p_cuModuleLoadData((CUmodule*)m, img); }
CUresult m2n_cuModuleGetFunction(uptr* f, uptr m, const char* name) { return p_cuModuleGetFunction((CUfunction*)f, (CUmodule)m, name); }
CUresult m2n_cuModuleUnload(uptr m) { return p_cuModuleUnload((CUmodule)m); }
CUresult m2n_cuStreamBeginCapture(uptr s, int mode) { return p_cuStreamBeginCapture((CUstream)s, mode); }
CUresult m2n_cuStreamEndCapture(uptr s, uptr* g) { return p_cuStreamEndCapture((CUstream)s, (CUgraph*)g); }
CUresult m2n_cuGraphInstantiate(uptr* x, uptr g) { return p_cuGraphInstantiateWithFlags((CUgraphExec*)x, (CUgraph)g, 0); }
CUresult m2n_cuGraphLaunch(uptr x, uptr s) { return p_cuGraphLaunch((CUgraphExec)x, (CUstream)s); }
CUresult m2n_cuGraphExecDestroy(uptr x) { return p_cuGraphExecDestroy((CUgraphExec)x); }
CUresult m2n_cuGraphDestroy(uptr g) { return p_cuGraphDestroy((CUgraph)g); }
const char* m2n_cuErrorName(CUresult r) { const char* s = 0; p_cuGetErrorName(r, &s); return s ? s : "CUDA_ERROR_UNKNOWN"; }
const char* m2n_cuErrorString(CUresult r) { const char* s = 0; p_cuGetErrorString(r, &s); return s ? s : "unknown error"; }

// m2n_launch launches a kernel whose one parameter is a struct of `size`
// bytes at `arg`, and, when extra is nonzero, a second pointer parameter.
CUresult m2n_launch(uptr f, unsigned grid, unsigned block, uptr stream, const void* arg, size_t size, ull extra, int nargs) {
	char buf[2048];
	if (size > sizeof buf) return 1; // CUDA_ERROR_INVALID_VALUE
	memcpy(buf, arg, size);
	void* params[2] = { buf, &extra };
	return p_cuLaunchKernel((CUfunction)f, grid, 1, 1, block, 1, 1, 0, (CUstream)stream, params, 0);
}

nvrtcResult m2n_nvrtcVersion(int* a, int* b) { return p_nvrtcVersion(a, b); }
nvrtcResult m2n_nvrtcCompile(const char* src, const char* const* opts, int nopts, uptr* prog) {
	nvrtcResult r = p_nvrtcCreateProgram((nvrtcProgram*)prog, src, "m2n_kernels.cu", 0, 0, 0);
	if (r) return r;
	return p_nvrtcCompileProgram((nvrtcProgram)*prog, nopts, opts);
}
nvrtcResult m2n_nvrtcLogSize(uptr p, size_t* n) { return p_nvrtcGetProgramLogSize((nvrtcProgram)p, n); }
nvrtcResult m2n_nvrtcLog(uptr p, char* s) { return p_nvrtcGetProgramLog((nvrtcProgram)p, s); }
nvrtcResult m2n_nvrtcCubinSize(uptr p, size_t* n) { return p_nvrtcGetCUBINSize((nvrtcProgram)p, n); }
nvrtcResult m2n_nvrtcCubin(uptr p, char* s) { return p_nvrtcGetCUBIN((nvrtcProgram)p, s); }
nvrtcResult m2n_nvrtcDestroy(uptr p) { nvrtcProgram q = (nvrtcProgram)p; return p_nvrtcDestroyProgram(&q); }
const char* m2n_nvrtcError(nvrtcResult r) { return p_nvrtcGetErrorString(r); }

ncclResult_t m2n_ncclGetVersion(int* v) { return p_ncclGetVersion(v); }
// m2n_ncclCommInfo: a communicator's size, rank and CUDA device.
ncclResult_t m2n_ncclCommInfo(uptr c, int* count, int* rank, int* dev) {
	ncclResult_t r = p_ncclCommCount((ncclComm_t)c, count);
	if (r == 0) r = p_ncclCommUserRank((ncclComm_t)c, rank);
	if (r == 0) r = p_ncclCommCuDevice((ncclComm_t)c, dev);
	return r;
}
ncclResult_t m2n_ncclGetUniqueId(char* out) { ncclUniqueId id; ncclResult_t r = p_ncclGetUniqueId(&id); memcpy(out, id.internal, 128); return r; }
ncclResult_t m2n_ncclCommInitRank(uptr* comm, int n, const char* idbytes, int rank, int blocking) {
	ncclUniqueId id; memcpy(id.internal, idbytes, 128);
	m2nNcclConfig cfg; cfg.size = sizeof cfg; cfg.magic = 0xcafebeef; cfg.version = 22803; cfg.blocking = blocking;
	cfg.cgaClusterSize = (int)0x80000000; // NCCL_CONFIG_UNDEF_INT
	return p_ncclCommInitRankConfig((ncclComm_t*)comm, n, id, rank, &cfg);
}
ncclResult_t m2n_ncclCommSplit(uptr parent, int color, int key, uptr* child, int blocking) {
	m2nNcclConfig cfg; cfg.size = sizeof cfg; cfg.magic = 0xcafebeef; cfg.version = 22803; cfg.blocking = blocking;
	cfg.cgaClusterSize = (int)0x80000000; // NCCL_CONFIG_UNDEF_INT
	return p_ncclCommSplit((ncclComm_t)parent, color, key, (ncclComm_t*)child, &cfg);
}
ncclResult_t m2n_ncclCommInitAll(uptr* comms, int n, const int* devs) { return p_ncclCommInitAll((ncclComm_t*)comms, n, devs); }
ncclResult_t m2n_ncclCommDestroy(uptr c) { return p_ncclCommDestroy((ncclComm_t)c); }
ncclResult_t m2n_ncclCommAbort(uptr c) { return p_ncclCommAbort((ncclComm_t)c); }
ncclResult_t m2n_ncclCommGetAsyncError(uptr c, int* st) { return p_ncclCommGetAsyncError((ncclComm_t)c, st); }
ncclResult_t m2n_ncclAllGather(ull send, ull recv, size_t n, uptr c, uptr s) { return p_ncclAllGather((const void*)send, (void*)recv, n, 1, (ncclComm_t)c, (CUstream)s); }
ncclResult_t m2n_ncclSend(ull buf, size_t n, int peer, uptr c, uptr s) { return p_ncclSend((const void*)buf, n, 1, peer, (ncclComm_t)c, (CUstream)s); }
ncclResult_t m2n_ncclRecv(ull buf, size_t n, int peer, uptr c, uptr s) { return p_ncclRecv((void*)buf, n, 1, peer, (ncclComm_t)c, (CUstream)s); }
ncclResult_t m2n_ncclGroupStart(void) { return p_ncclGroupStart(); }
ncclResult_t m2n_ncclGroupEnd(void) { return p_ncclGroupEnd(); }
const char* m2n_ncclError(ncclResult_t r) { return p_ncclGetErrorString(r); }
const char* m2n_ncclLastError(uptr c) { return p_ncclGetLastError((ncclComm_t)c); }
