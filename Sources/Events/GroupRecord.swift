// Group records (format version 2): the requests of one group commit, framed as ONE record.
// docs/log-format.md ("Group record") is the specification; this is its code.
//
//   group record header = the 80 bytes of a version-1 record header (type 254, codec of the body,
//                         offset = the first member's offset, fixCount = sum, receivedAt = min,
//                         recorded range over the members with fixes, deviceKey 0, key zero)
//                         + u32 memberCount + u32 offsetSpan + i64 receivedMaxMicros   (96 bytes)
//   body (before codec) = u32 M
//                         M × u8 type | M × u8 codec | M × u16 flags | M × u16 eventVersion
//                         8 planes × M offsetDelta          (member offset - group offset)
//                         8 planes × M receivedAt           zigzag(delta from the previous member;
//                                                           the first from the header's receivedAt)
//                         8 planes × M recordedMin          zigzag(delta from the previous member's)
//                         8 planes × M recordedMax - recordedMin
//                         8 planes × M fixCount | uncompressedBytes | storedBytes | deviceKey
//                         M × 16 idempotencyKey
//                         the raw member payloads (codec 0), interleaved: byte 0 of each, then
//                         byte 1 of each that has one, ..., longest first (ties in member order);
//                         then the other members' payloads (their appenders' LZ4 blocks), one
//                         after the other in member order
//
// Why columns: the members of a group share type, flags, version, the high bytes of both clocks
// and of the device key; byte planes turn that into runs LZ4 removes, leaving per request little
// more than its batch id and the low bytes that differ. Why members keep their own codec: a small
// payload (a few fixes) is stored raw so that the group's LZ4 also finds what it shares with its
// neighbours; a large one stays as the appender's thread compressed it, in parallel, so that the
// leader of a group commit never compresses megabytes while others wait.

/// The fields a group record's header adds to the 80 bytes of a version-1 record header.
public struct GroupExtent: Equatable, Sendable {
    /// Requests in the group (at least 1).
    public var memberCount: UInt32
    /// Offsets the group covers: the last member's offset + 1 - the group's offset. Equal to
    /// `memberCount` unless a rewrite dropped members (then the dropped ones are gaps).
    public var offsetSpan: UInt32
    public var receivedMaxMicros: Int64

    public init(memberCount: UInt32, offsetSpan: UInt32, receivedMaxMicros: Int64) {
        self.memberCount = memberCount
        self.offsetSpan = offsetSpan
        self.receivedMaxMicros = receivedMaxMicros
    }

    static let bytes = 16

    func write(to writer: inout ByteWriter) {
        writer.u32(memberCount)
        writer.u32(offsetSpan)
        writer.i64(receivedMaxMicros)
    }

    static func read(_ bytes: ArraySlice<UInt8>) throws -> GroupExtent {
        var reader = ByteReader(bytes)
        return GroupExtent(
            memberCount: try reader.u32(), offsetSpan: try reader.u32(), receivedMaxMicros: try reader.i64())
    }
}

/// One request of a group record: the header it would have as a record of its own (offset and
/// salt included) and its payload in the header's codec.
public struct GroupMember: Sendable {
    public var header: RecordHeader
    public var payload: [UInt8]

    public init(header: RecordHeader, payload: [UInt8]) {
        self.header = header
        self.payload = payload
    }
}

public enum GroupRecord {
    /// A member payload that decodes to fewer bytes than this is stored raw inside the group.
    static let memberRawBytesMax = 1024
    /// Upper bound of the body bytes a member adds besides its payload (columns and batch id).
    static let memberDirectoryBytes = 2 + 2 + 2 + 8 * 8 + 16

    /// The form an encoded event takes inside a group (see the top of this file). Runs on the
    /// appender's thread.
    public static func member(_ encoded: EncodedEvent) -> GroupMember {
        var header = encoded.header
        var payload = encoded.payload
        if header.codec == Codec.lz4.rawValue, Int(header.uncompressedBytes) < memberRawBytesMax,
            let raw = try? LZ4.decompress(payload, uncompressedBytes: Int(header.uncompressedBytes))
        {
            header.codec = Codec.none.rawValue
            payload = raw
        }
        return GroupMember(header: header, payload: payload)
    }

    /// Appends one group frame holding `members` (offsets set, ascending) to `buffer`; returns the
    /// group's header and extent (what a seal accounts for).
    @discardableResult
    public static func append(members: [GroupMember], salt: UInt64, to buffer: inout [UInt8])
        -> (header: RecordHeader, extent: GroupExtent)
    {
        precondition(!members.isEmpty, "a group record holds at least one request")
        var summary = Seal(firstOffset: members[0].header.offset)
        for member in members { summary.add(member.header) }
        let first = members[0].header.offset
        let span = members.last!.header.offset + 1 - first
        precondition(span <= UInt64(UInt32.max), "group spans too many offsets")
        let raw = body(members, first: first, receivedFirst: summary.receivedMinMicros)
        var codec = Codec.none
        var stored = raw
        if let compressed = LZ4.compress(raw) {
            codec = .lz4
            stored = compressed
        }
        let header = RecordHeader(
            type: LogFormat.groupType, codec: codec.rawValue, eventVersion: 1, salt: salt, offset: first,
            receivedAtMicros: summary.receivedMinMicros, recordedMinMicros: summary.recordedMinMicros,
            recordedMaxMicros: summary.recordedMaxMicros, fixCount: UInt32(clamping: summary.fixCount),
            uncompressedBytes: UInt32(raw.count))
        let extent = GroupExtent(
            memberCount: UInt32(members.count), offsetSpan: UInt32(span),
            receivedMaxMicros: summary.receivedMaxMicros)
        var headerExtension = ByteWriter(capacity: GroupExtent.bytes)
        extent.write(to: &headerExtension)
        Frame.append(header: header, headerExtension: headerExtension.bytes, payload: stored, to: &buffer)
        return (header, extent)
    }

    private static func body(_ members: [GroupMember], first: UInt64, receivedFirst: Int64) -> [UInt8] {
        let count = members.count
        var writer = ByteWriter(
            capacity: 4 + count * memberDirectoryBytes + members.reduce(0) { $0 + $1.payload.count })
        writer.u32(UInt32(count))
        for member in members { writer.u8(member.header.type) }
        for member in members { writer.u8(member.header.codec) }
        for member in members { writer.u16(member.header.flags) }
        for member in members { writer.u16(member.header.eventVersion) }
        FixCodec.appendPlanes(members.map { $0.header.offset - first }, to: &writer)
        var receivedDeltas: [UInt64] = []
        var recordedDeltas: [UInt64] = []
        receivedDeltas.reserveCapacity(count)
        recordedDeltas.reserveCapacity(count)
        var previousReceived = receivedFirst
        var previousRecorded: Int64 = 0
        for member in members {
            receivedDeltas.append(zigzag(member.header.receivedAtMicros &- previousReceived))
            recordedDeltas.append(zigzag(member.header.recordedMinMicros &- previousRecorded))
            previousReceived = member.header.receivedAtMicros
            previousRecorded = member.header.recordedMinMicros
        }
        FixCodec.appendPlanes(receivedDeltas, to: &writer)
        FixCodec.appendPlanes(recordedDeltas, to: &writer)
        FixCodec.appendPlanes(
            members.map { UInt64(bitPattern: $0.header.recordedMaxMicros &- $0.header.recordedMinMicros) },
            to: &writer)
        FixCodec.appendPlanes(members.map { UInt64($0.header.fixCount) }, to: &writer)
        FixCodec.appendPlanes(members.map { UInt64($0.header.uncompressedBytes) }, to: &writer)
        FixCodec.appendPlanes(members.map { UInt64($0.payload.count) }, to: &writer)
        FixCodec.appendPlanes(members.map(\.header.deviceKey), to: &writer)
        for member in members {
            writer.u64(member.header.idempotencyKey.high.bigEndian)
            writer.u64(member.header.idempotencyKey.low.bigEndian)
        }
        // Small raw payloads interleaved, then the appenders' LZ4 blocks as they are.
        appendInterleaved(
            members.filter { $0.header.codec == Codec.none.rawValue }.map(\.payload), to: &writer)
        for member in members where member.header.codec != Codec.none.rawValue { writer.raw(member.payload) }
        return writer.bytes
    }

    /// The members' payloads in their order of interleaving: longest first, ties in member order.
    private static func interleavingOrder(_ lengths: [Int]) -> [Int] {
        lengths.indices.sorted { lengths[$0] != lengths[$1] ? lengths[$0] > lengths[$1] : $0 < $1 }
    }

    /// Writes byte 0 of every payload, then byte 1 of every payload that has one, and so on: the
    /// same field of similar requests (the fix count, the source table, the high bytes of a
    /// coordinate) ends up side by side, where LZ4 sees a run instead of a scattered repeat.
    static func appendInterleaved(_ payloads: [[UInt8]], to writer: inout ByteWriter) {
        let lengths = payloads.map(\.count)
        let total = lengths.reduce(0, +)
        guard total > 0 else { return }
        let order = interleavingOrder(lengths)
        var flat: [UInt8] = []
        flat.reserveCapacity(total)
        var starts: [Int] = []
        for payload in payloads {
            starts.append(flat.count)
            flat.append(contentsOf: payload)
        }
        var position = writer.bytes.count
        writer.bytes.append(contentsOf: repeatElement(0, count: total))
        var active = order.count
        writer.bytes.withUnsafeMutableBufferPointer { output in
            flat.withUnsafeBufferPointer { input in
                for index in 0..<lengths[order[0]] {
                    while lengths[order[active - 1]] <= index { active -= 1 }
                    for rank in 0..<active {
                        output[position] = input[starts[order[rank]] + index]
                        position += 1
                    }
                }
            }
        }
    }

    /// Undoes `appendInterleaved` for payloads of the given lengths: the payloads one after the
    /// other, in member order.
    static func deinterleave(_ bytes: ArraySlice<UInt8>, lengths: [Int]) -> [UInt8] {
        var flat = [UInt8](repeating: 0, count: bytes.count)
        guard let longest = lengths.max(), longest > 0 else { return flat }
        let order = interleavingOrder(lengths)
        var starts: [Int] = []
        var total = 0
        for length in lengths {
            starts.append(total)
            total += length
        }
        var active = order.count
        flat.withUnsafeMutableBufferPointer { output in
            bytes.withUnsafeBufferPointer { input in
                var inputIndex = 0
                for index in 0..<longest {
                    while lengths[order[active - 1]] <= index { active -= 1 }
                    for rank in 0..<active {
                        output[starts[order[rank]] + index] = input[inputIndex]
                        inputIndex += 1
                    }
                }
            }
        }
        return flat
    }

    /// The members of a group frame, each with the header it would have as a record of its own.
    /// Checks that the body agrees with the group header (member count, offsets inside the span
    /// and ascending, payload sizes adding up); a body that does not is damage the CRC missed,
    /// or a writer bug, and is reported, never guessed at.
    /// `wantPayload` says per member whether its payload is copied out (a header-only scan
    /// leaves it empty, as `LogReader` does for a version-1 record).
    public static func members(
        header: RecordHeader, extent: GroupExtent, stored: [UInt8],
        wantPayload: (RecordHeader) -> Bool = { _ in true }
    ) throws -> [GroupMember] {
        let raw = try EventCodec.rawPayload(header: header, stored: stored)
        var reader = ByteReader(raw)
        let count = Int(try reader.u32())
        guard count == Int(extent.memberCount), count >= 1 else {
            throw DecodeError.invalid(
                "group body holds \(count) requests, its header says \(extent.memberCount)")
        }
        guard count <= reader.remaining / memberDirectoryBytes + 1 else {
            throw DecodeError.invalid("group member count \(count) too large for its body")
        }
        let types = Array(try reader.raw(count))
        let codecs = Array(try reader.raw(count))
        var flags: [UInt16] = []
        var versions: [UInt16] = []
        flags.reserveCapacity(count)
        versions.reserveCapacity(count)
        for _ in 0..<count { flags.append(try reader.u16()) }
        for _ in 0..<count { versions.append(try reader.u16()) }
        func column() throws -> [UInt64] { FixCodec.planes(try reader.raw(8 * count), count: count) }
        let offsetDeltas = try column()
        let receivedDeltas = try column()
        let recordedMinDeltas = try column()
        let recordedSpans = try column()
        let fixCounts = try column()
        let uncompressed = try column()
        let storedBytes = try column()
        let devices = try column()
        var members: [GroupMember] = []
        members.reserveCapacity(count)
        var received = header.receivedAtMicros
        var payloadBytes = 0
        var recordedMin: Int64 = 0
        var keys: [UUID128] = []
        keys.reserveCapacity(count)
        for _ in 0..<count {
            let high = UInt64(bigEndian: try reader.u64())
            keys.append(UUID128(high: high, low: UInt64(bigEndian: try reader.u64())))
        }
        for index in 0..<count {
            let delta = offsetDeltas[index]
            guard delta < UInt64(extent.offsetSpan), index == 0 ? delta == 0 : delta > offsetDeltas[index - 1]
            else { throw DecodeError.invalid("group member \(index) has offset delta \(delta) out of order") }
            guard fixCounts[index] <= UInt64(UInt32.max), uncompressed[index] <= UInt64(UInt32.max),
                storedBytes[index] <= UInt64(reader.remaining)
            else { throw DecodeError.invalid("group member \(index) has sizes out of range") }
            payloadBytes += Int(storedBytes[index])
            received = received &+ unzigzag(receivedDeltas[index])
            recordedMin = recordedMin &+ unzigzag(recordedMinDeltas[index])
            let memberHeader = RecordHeader(
                type: types[index], codec: codecs[index], flags: flags[index], eventVersion: versions[index],
                salt: header.salt, offset: header.offset + delta, receivedAtMicros: received,
                recordedMinMicros: recordedMin,
                recordedMaxMicros: recordedMin &+ Int64(bitPattern: recordedSpans[index]),
                fixCount: UInt32(fixCounts[index]), uncompressedBytes: UInt32(uncompressed[index]),
                deviceKey: devices[index], idempotencyKey: keys[index])
            members.append(GroupMember(header: memberHeader, payload: []))
        }
        guard reader.remaining == payloadBytes else {
            throw DecodeError.invalid(
                "group body has \(reader.remaining) bytes of payloads, its requests add up to \(payloadBytes)"
            )
        }
        let isRaw = codecs.map { $0 == Codec.none.rawValue }
        let rawLengths = (0..<count).filter { isRaw[$0] }.map { Int(storedBytes[$0]) }
        let interleaved = try reader.raw(rawLengths.reduce(0, +))
        let wanted = members.map { wantPayload($0.header) }
        let rawPayloads =
            wanted.contains(true) && !rawLengths.isEmpty
            ? deinterleave(interleaved, lengths: rawLengths) : []
        var rawPosition = 0
        for index in 0..<count {
            let length = Int(storedBytes[index])
            if isRaw[index] {
                if wanted[index] {
                    members[index].payload = Array(rawPayloads[rawPosition..<(rawPosition + length)])
                }
                rawPosition += length
            } else {
                let block = try reader.raw(length)
                if wanted[index] { members[index].payload = Array(block) }
            }
        }
        guard offsetDeltas[count - 1] + 1 == UInt64(extent.offsetSpan) else {
            throw DecodeError.invalid("group's last request does not end its offset span")
        }
        return members
    }

    @inline(__always) static func zigzag(_ value: Int64) -> UInt64 {
        UInt64(bitPattern: (value << 1) ^ (value >> 63))
    }

    @inline(__always) static func unzigzag(_ value: UInt64) -> Int64 {
        Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }
}
