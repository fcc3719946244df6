#if canImport(Glibc)
    import Glibc
#endif

/// One `.rec` file of an OwnTracks Recorder store, with the user and device its path names.
public struct RecorderStoreFile: Equatable, Sendable {
    public var user: String
    public var device: String
    public var path: String

    public init(user: String, device: String, path: String) {
        self.user = user
        self.device = device
        self.path = path
    }
}

/// OwnTracks Recorder's store on disk: `STORAGEDIR/rec/USER/DEVICE/YYYY-MM.rec` (storage.c), one
/// file a month per device. `root` may be the store directory (holding `rec/`) or `rec/` itself.
public enum RecorderStore {
    /// Every `.rec` file under the store, by user, device and file name (so each device's months
    /// come in order). Hidden entries are passed over.
    public static func files(root: String) throws(ImportError) -> [RecorderStoreFile] {
        let trimmed = root.hasSuffix("/") && root.count > 1 ? String(root.dropLast()) : root
        let recDirectory = isDirectory(trimmed + "/rec") ? trimmed + "/rec" : trimmed
        var found: [RecorderStoreFile] = []
        for user in try entries(recDirectory) where isDirectory(recDirectory + "/" + user) {
            let userDirectory = recDirectory + "/" + user
            for device in try entries(userDirectory) where isDirectory(userDirectory + "/" + device) {
                let deviceDirectory = userDirectory + "/" + device
                for file in try entries(deviceDirectory) where file.hasSuffix(".rec") {
                    let path = deviceDirectory + "/" + file
                    if !isDirectory(path) {
                        found.append(RecorderStoreFile(user: user, device: device, path: path))
                    }
                }
            }
        }
        if found.isEmpty {
            throw ImportError("no .rec files under \(root): expected rec/USER/DEVICE/YYYY-MM.rec")
        }
        return found
    }

    /// The names in a directory, sorted, without hidden ones. Wraps opendir(3)/readdir(3).
    static func entries(_ path: String) throws(ImportError) -> [String] {
        guard let directory = opendir(path) else {
            throw ImportError("cannot list \(path): \(String(cString: strerror(errno)))")
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if !name.hasPrefix(".") { names.append(name) }
        }
        return names.sorted()
    }

    static func isDirectory(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFDIR
    }
}
