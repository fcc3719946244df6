import CMicroHTTPD
import Threads

/// A complete response's body handed to MHD without a copy: MHD sends from the array's own
/// storage, which this object keeps alive until MHD's free callback (`heldBodyReleased`).
///
/// Why: a 30-day history page is 2.5 MB, and `RESPMEM_MUST_COPY` made MHD allocate a second
/// buffer of that size and copy the answer into it before sending it (docs/benchmarks.md). Small
/// bodies are still copied: a copy of a few KiB costs less than this object and its retain.
///
/// The array is not mutated while MHD may read it, so its storage, a native Swift array's heap
/// buffer, stays where it is; MHD only reads it, from any thread, and releases it once the response
/// is destroyed (sent, or the connection closed). Then the array goes to `keptBuffers` (a large
/// answer's array serves the next one, `KeptBuffers`), or is freed.
final class HeldBody: @unchecked Sendable {
    private var bytes: [UInt8]
    private let keptBuffers: KeptBuffers

    /// Bodies from this size on are sent from the array itself.
    static let heldBytesMin = 16 << 10

    private init(_ bytes: [UInt8], keptBuffers: KeptBuffers) {
        self.bytes = bytes
        self.keptBuffers = keptBuffers
    }

    /// MHD is done with the bytes: the array goes to the pool with no other reference to it.
    fileprivate func released() {
        var bytes: [UInt8] = []
        swap(&bytes, &self.bytes)
        keptBuffers.giveBack(bytes)
    }

    /// An MHD response for `body` (nil when MHD refuses it: out of memory); a held body's array
    /// goes to `keptBuffers` once sent.
    static func response(_ body: [UInt8], keptBuffers: KeptBuffers) -> OpaquePointer? {
        guard body.count >= heldBytesMin else {
            return body.withUnsafeBytes { bytes in
                MHD_create_response_from_buffer(
                    bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
            }
        }
        let held = HeldBody(body, keptBuffers: keptBuffers)
        let start = held.bytes.withUnsafeBytes { UnsafeMutableRawPointer(mutating: $0.baseAddress) }
        // Retained for MHD until heldBodyReleased.
        let retained = Unmanaged.passRetained(held)
        let response = MHD_create_response_from_buffer_with_free_callback_cls(
            body.count, start, heldBodyReleased, retained.toOpaque())
        if response == nil { retained.release() }
        return response
    }
}

/// MHD_ContentReaderFreeCallback of a held body: MHD is done with it; gives its array to the pool
/// and releases its retain.
private func heldBodyReleased(_ context: UnsafeMutableRawPointer?) {
    guard let context else { return }
    let held = Unmanaged<HeldBody>.fromOpaque(context).takeRetainedValue()
    held.released()
}
