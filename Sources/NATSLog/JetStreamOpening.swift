import CNATS
import Events
import Threads

#if canImport(Glibc)
    import Glibc
#endif

// Opening the log: connecting to the cluster, then creating the stream or checking that the one
// found is the one configured (partitions, storage, replicas), waiting while the cluster forms.
extension JetStreamLog {
    static func connect(_ configuration: JetStreamLogConfiguration) throws -> (
        OpaquePointer, OpaquePointer
    ) {
        var options: OpaquePointer?
        guard natsOptions_Create(&options) == NATS_OK, let options else {
            throw JetStreamLogError.connectFailed("cannot create client options")
        }
        defer { natsOptions_Destroy(options) }
        let servers = configuration.servers.map { CString($0) }
        var pointers: [UnsafePointer<CChar>?] = servers.map { $0.constant }
        // The strings must outlive the call (the client copies them): without this an optimised
        // build freed them after `pointers` was made, and the client saw garbage URLs.
        var status = withExtendedLifetime(servers) {
            pointers.withUnsafeMutableBufferPointer {
                natsOptions_SetServers(options, $0.baseAddress, Int32($0.count))
            }
        }
        // Reconnect for ever (a node restarting is routine), quickly, to any node of the list.
        if status == NATS_OK { status = natsOptions_SetMaxReconnect(options, -1) }
        if status == NATS_OK { status = natsOptions_SetReconnectWait(options, 100) }
        if status == NATS_OK { status = natsOptions_SetTimeout(options, 2_000) }
        guard status == NATS_OK else {
            throw JetStreamLogError.connectFailed("bad server list: \(describe(status, jsErrCode(0)))")
        }
        var connection: OpaquePointer?
        let deadline = monotonicMicros() + configuration.openDeadlineMillis * 1000
        while true {
            status = natsConnection_Connect(&connection, options)
            if status == NATS_OK, connection != nil { break }
            guard monotonicMicros() < deadline else {
                throw JetStreamLogError.connectFailed(
                    "\(configuration.servers.joined(separator: ",")): \(describe(status, jsErrCode(0)))")
            }
            usleep(100_000)
        }
        var jsOptions = jsOptions()
        jsOptions_Init(&jsOptions)
        jsOptions.Wait = configuration.publishAckWaitMillis
        var jetStream: OpaquePointer?
        guard natsConnection_JetStream(&jetStream, connection, &jsOptions) == NATS_OK, let jetStream else {
            natsConnection_Destroy(connection)
            throw JetStreamLogError.connectFailed("cannot create a JetStream context")
        }
        return (connection!, jetStream)
    }

    /// Creates or verifies the stream, retrying while the cluster has no JetStream leader yet.
    func openStream() throws {
        let deadline = monotonicMicros() + configuration.openDeadlineMillis * 1000
        while true {
            var info: UnsafeMutablePointer<jsStreamInfo>?
            var code = jsErrCode(0)
            var status = js_GetStreamInfo(&info, jetStream, streamName.constant, nil, &code)
            if code == JSStreamNotFoundErr {
                guard configuration.createsStream else {
                    throw JetStreamLogError.streamMissing(stream: streamName.text)
                }
                status = createStream(&info, &code)
            }
            if status == NATS_OK, let info {
                defer { jsStreamInfo_Destroy(info) }
                try verify(info.pointee.Config.pointee)
                return
            }
            // "No suitable peers for placement" while the cluster is still forming (fewer nodes
            // known than replicas): it passes once every node has joined, or the deadline says why.
            let forming = code == JSClusterNoPeersErr
            guard Self.isTransient(status, code) || forming, monotonicMicros() < deadline else {
                throw JetStreamLogError.requestFailed(
                    "opening stream \(streamName.text): \(Self.describe(status, code))")
            }
            usleep(100_000)
        }
    }

    func createStream(_ info: inout UnsafeMutablePointer<jsStreamInfo>?, _ code: inout jsErrCode)
        -> natsStatus
    {
        var config = jsStreamConfig()
        jsStreamConfig_Init(&config)
        var subjectPointers: [UnsafePointer<CChar>?] = subjects.map { $0.constant }
        return subjectPointers.withUnsafeMutableBufferPointer { buffer in
            config.Name = streamName.constant
            config.Subjects = buffer.baseAddress
            config.SubjectsLen = Int32(buffer.count)
            config.Storage = js_FileStorage
            config.Replicas = Int64(configuration.replicas)
            config.Retention = js_LimitsPolicy
            // Nanoseconds.
            config.Duplicates = Int64(configuration.duplicateWindowSeconds) * 1_000_000_000
            // Purging would empty a partition whole; retention deletes expired messages one by one.
            config.DenyPurge = true
            return js_AddStream(&info, jetStream, &config, nil, &code)
        }
    }

    func verify(_ config: jsStreamConfig) throws {
        let name = streamName.text
        let found = (0..<Int(config.SubjectsLen)).compactMap { index in
            config.Subjects[index].map { String(cString: $0) }
        }
        let expected = subjects.map(\.text)
        guard found.count == expected.count else {
            throw JetStreamLogError.wrongPartitionCount(
                stream: name, found: found.count, expected: expected.count)
        }
        guard Set(found) == Set(expected) else {
            throw JetStreamLogError.wrongConfiguration(
                stream: name, "its subjects are \(found.joined(separator: ", ")), not \(expected.first!)...")
        }
        guard config.Storage == js_FileStorage else {
            throw JetStreamLogError.wrongConfiguration(
                stream: name, "memory storage; a log needs file storage")
        }
        guard config.Replicas == Int64(configuration.replicas) else {
            throw JetStreamLogError.wrongConfiguration(
                stream: name, "\(config.Replicas) replicas, \(configuration.replicas) configured")
        }
    }
}
