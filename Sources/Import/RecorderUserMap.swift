/// Which findmy user each OwnTracks Recorder user's devices go to, from the command line's
/// `--user-map recorder_user=findmy_user` (repeatable). A Recorder user the map does not name goes
/// to the import's own user (`--user`). Devices keep their Recorder name: each (findmy user, device
/// name) is one findmy device.
public struct RecorderUserMap: Equatable, Sendable {
    public private(set) var findmyUserOf: [String: String]
    public var defaultUser: String

    /// Parses `recorder_user=findmy_user` pairs. Both names must be non-empty, and a Recorder user
    /// may be named once: two targets for one user is a mistake to report, not to resolve.
    public init(pairs: [String], defaultUser: String) throws(ImportError) {
        findmyUserOf = [:]
        self.defaultUser = defaultUser
        for pair in pairs {
            guard let equals = pair.firstIndex(of: "=") else {
                throw ImportError("--user-map \(pair): expected recorder_user=findmy_user")
            }
            let recorderUser = String(pair[..<equals])
            let findmyUser = String(pair[pair.index(after: equals)...])
            guard !recorderUser.isEmpty, !findmyUser.isEmpty else {
                throw ImportError("--user-map \(pair): both names are needed, recorder_user=findmy_user")
            }
            if let earlier = findmyUserOf[recorderUser], earlier != findmyUser {
                throw ImportError(
                    "--user-map names \(recorderUser) twice (\(earlier) and \(findmyUser)): give one findmy user"
                )
            }
            findmyUserOf[recorderUser] = findmyUser
        }
    }

    public func findmyUser(recorderUser: String) -> String {
        findmyUserOf[recorderUser] ?? defaultUser
    }

    /// The store's files grouped by the findmy device they go to, in the store's order (each
    /// device's months in order). Two Recorder users mapped to one findmy user keep their devices
    /// apart unless the devices share a name, in which case their files go to the one device.
    public func targets(_ files: [RecorderStoreFile]) -> [RecorderImportTarget] {
        var targets: [RecorderImportTarget] = []
        var indexOf: [RecorderImportTarget.Key: Int] = [:]
        for file in files {
            let key = RecorderImportTarget.Key(
                findmyUser: findmyUser(recorderUser: file.user), deviceName: file.device)
            if let index = indexOf[key] {
                targets[index].files.append(file)
            } else {
                indexOf[key] = targets.count
                targets.append(
                    RecorderImportTarget(
                        findmyUser: key.findmyUser, deviceName: key.deviceName, files: [file]))
            }
        }
        return targets
    }
}

/// The Recorder files that go to one findmy device: the device named `deviceName` of `findmyUser`.
public struct RecorderImportTarget: Equatable, Sendable {
    public var findmyUser: String
    public var deviceName: String
    public var files: [RecorderStoreFile]

    struct Key: Hashable {
        var findmyUser: String
        var deviceName: String
    }
}
