// glibc's mallopt(3), declared here: <malloc.h> is not part of Swift's Glibc module.

/// `M_ARENA_MAX` from <malloc.h>: the most arenas malloc creates.
let glibcMallocArenaMax: Int32 = -8

/// `M_MMAP_THRESHOLD` from <malloc.h>: blocks of this size and more are mapped on their own;
/// setting it turns off glibc's raising of it (and of the trim threshold) as large blocks are freed.
let glibcMallocMmapThreshold: Int32 = -3

/// `M_TRIM_THRESHOLD` from <malloc.h>: free memory at the top of the heap beyond this is given back
/// to the system (glibc sets it to twice the mmap threshold when it raises that one itself).
let glibcMallocTrimThreshold: Int32 = -1

/// `int mallopt(int param, int value)`; returns 1 on success, 0 on error.
@_silgen_name("mallopt")
func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32
