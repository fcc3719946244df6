import Foundation
import Postgres
import Testing

/// `findmy purge` as an operator (or a slip of the keyboard) meets it: it deletes a findmy data
/// directory and everything findmy keeps for it, and nothing else. Every target that must be
/// refused is given WITHOUT `--yes` (and standard input is /dev/null, so no question can be
/// answered), except directories this test made itself: if a refusal ever broke, nothing of the
/// machine's would go.
@Suite(.serialized) struct PurgeTests {
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    static func realPath(_ path: String) -> String {
        URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    }

    @Test func aDirectoryWithoutFindmyDataIsRefusedAndLeftAlone() throws {
        let scratch = ScratchDirectory("findmy-purge")
        let plain = scratch.path + "/x"
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: false)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: plain + "/file.txt"))
        // Names findmy uses, without what findmy writes in them: an empty LOCK and a segment
        // that is not one.
        let lookalike = scratch.path + "/lookalike"
        try FileManager.default.createDirectory(atPath: lookalike + "/log", withIntermediateDirectories: true)
        try Data().write(to: URL(fileURLWithPath: lookalike + "/log/LOCK"))
        try Data(repeating: 7, count: 200).write(
            to: URL(fileURLWithPath: lookalike + "/log/00000000000000000000.seg"))

        for target in [plain, lookalike] {
            let purge = try FindmyProcess.run(["purge", "--data-dir", target, "--yes"])
            #expect(purge.status != 0, "\(purge.output)")
            #expect(purge.error.contains("not a findmy data directory"), "\(purge.error)")
            #expect(!purge.output.contains("deleted"), "\(purge.output)")
        }
        #expect(try String(contentsOfFile: plain + "/file.txt", encoding: .utf8) == "mine")
        #expect(Self.exists(lookalike + "/log/00000000000000000000.seg"))
    }

    @Test func theRootTheHomeDirectoryAndSystemDirectoriesAreRefusedBeforeAnyQuestion() throws {
        let scratch = ScratchDirectory("findmy-purge")
        let rootLink = scratch.path + "/root-link"
        try FileManager.default.createSymbolicLink(atPath: rootLink, withDestinationPath: "/")
        let home = ProcessInfo.processInfo.environment["HOME"].map(Self.realPath)
        var targets = [
            ("/", "the root directory"), (rootLink, "the root directory"),
            ("/etc", "not a findmy data directory"),
        ]
        if let home, home != "/" { targets.append((home, "home directory")) }
        for (target, reason) in targets {
            // Never with --yes: a refusal that broke would otherwise delete the machine's files.
            let purge = try FindmyProcess.run(["purge", "--data-dir", target])
            #expect(purge.status != 0, "\(target): \(purge.output)")
            #expect(purge.error.contains("refuses"), "\(target): \(purge.error)")
            #expect(purge.error.contains(reason), "\(target): \(purge.error)")
            #expect(!(purge.output + purge.error).contains("deletes for good"), "\(target) was offered")
        }
    }

    /// A tmpfs (another device than its parent) and a bind mount of a data directory (the same
    /// device: only the mount table tells) are both refused, even with --yes.
    @Test func aMountPointIsRefusedEvenWhenItHoldsFindmyData() throws {
        guard getuid() == 0 else { return }  // only root mounts
        let scratch = ScratchDirectory("findmy-purge")
        let volume = scratch.path + "/volume"
        let data = scratch.path + "/data"
        let bound = scratch.path + "/bound"
        for directory in [volume, bound] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        }
        _ = try addUser("anna", data: data)
        let tmpfs = try FindmyProcess.run(
            ["-t", "tmpfs", "-o", "size=16m", "tmpfs", volume], executable: "/bin/mount")
        // Root without the right to mount (a container without CAP_SYS_ADMIN): nothing to test here.
        guard tmpfs.status == 0 else { return }
        defer { #expect((try? FindmyProcess.run([volume], executable: "/bin/umount"))?.status == 0) }
        let bind = try FindmyProcess.run(["--bind", data, bound], executable: "/bin/mount")
        try #require(bind.status == 0, "\(bind.error)")
        defer { #expect((try? FindmyProcess.run([bound], executable: "/bin/umount"))?.status == 0) }
        _ = try addUser("anna", data: volume)

        // --yes on mounts this test made itself: refused all the same.
        for mounted in [volume, bound] {
            #expect(Self.exists(mounted + "/log/LOCK"))
            let purge = try FindmyProcess.run(["purge", "--data-dir", mounted, "--yes"])
            #expect(purge.status != 0, "\(purge.output)")
            #expect(
                purge.error.contains("refuses") && purge.error.contains("mount point"),
                "\(mounted): \(purge.error)")
            #expect(Self.exists(mounted + "/log/LOCK"))
            #expect(
                try !FileManager.default.contentsOfDirectory(atPath: mounted + "/log").filter {
                    $0.hasSuffix(".seg")
                }.isEmpty)
        }
    }

    /// `link -> data`, data made by `findmy serve` with its cluster (and, as root, its OS user):
    /// purging the link deletes what it points to, then the link, and says so.
    @Test func purgeThroughASymbolicLinkDeletesTheDataDirectoryAndTheLink() throws {
        let scratch = ScratchDirectory("findmy-purge")
        let data = scratch.path + "/data"
        let server = try ServerProcess(data: data, extraArguments: ["--projector", "on"])
        #expect(server.stop() == 0)
        let resolved = Self.realPath(data)
        let user = instanceOSUserName(resolved)
        if getuid() == 0 { #expect(getpwnam(user) != nil, "the cluster runs as an OS user of its own") }
        let link = URL(fileURLWithPath: scratch.path + "/link").standardizedFileURL.path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: data)

        let purge = try FindmyProcess.run(["purge", "--data-dir", link, "--yes"])
        #expect(purge.status == 0, "\(purge.output)\n\(purge.error)")
        #expect(!Self.exists(data), "the data directory the link points to is still there")
        #expect(!Self.exists(link), "the link is still there")
        #expect(getpwnam(user) == nil, "OS user \(user) is still there")
        #expect(purge.output.contains("deleted \(resolved)"), "\(purge.output)")
        #expect(purge.output.contains("deleted \(link)"), "\(purge.output)")
    }

    /// A data directory holding only a log (`findmy user add`): the plan is printed before anything
    /// goes, also with --yes, and each line is confirmed after.
    @Test func aDataDirectoryIsListedThenDeleted() throws {
        let scratch = ScratchDirectory("findmy-purge")
        let data = scratch.path + "/data"
        _ = try addUser("anna", data: data)
        let resolved = Self.realPath(data)

        let purge = try FindmyProcess.run(["purge", "--data-dir", data, "--yes"])
        #expect(purge.status == 0, "\(purge.output)\n\(purge.error)")
        #expect(!Self.exists(data))
        let lines = purge.output.split(separator: "\n").map(String.init)
        let planned = try #require(lines.firstIndex { $0.contains("deletes for good") }, "\(purge.output)")
        let deleted = try #require(lines.firstIndex { $0 == "deleted \(resolved)" }, "\(purge.output)")
        #expect(planned < deleted)
        #expect(lines[planned...deleted].contains { $0.trimmingCharacters(in: .whitespaces) == resolved })
    }

    /// A file that cannot be deleted (immutable, `chattr +i`): purge names what is left and fails,
    /// and never says the directory was deleted.
    @Test func whatCannotBeDeletedIsNamedAndPurgeFails() throws {
        guard getuid() == 0 else { return }  // only root sets the immutable flag
        let scratch = ScratchDirectory("findmy-purge")
        let data = scratch.path + "/data"
        _ = try addUser("anna", data: data)
        let resolved = Self.realPath(data)
        let segment = try #require(
            try FileManager.default.contentsOfDirectory(atPath: data + "/log").first { $0.hasSuffix(".seg") })
        let pinned = data + "/log/" + segment
        guard try FindmyProcess.run(["+i", pinned], executable: "/usr/bin/chattr").status == 0 else {
            return  // a file system without the flag
        }
        defer { _ = try? FindmyProcess.run(["-i", pinned], executable: "/usr/bin/chattr") }

        let purge = try FindmyProcess.run(["purge", "--data-dir", data, "--yes"])
        #expect(purge.status == 1, "\(purge.output)\n\(purge.error)")
        #expect(!purge.output.contains("deleted \(resolved)"), "\(purge.output)")
        #expect(purge.error.contains("not deleted: \(resolved)"), "\(purge.error)")
        #expect(Self.exists(pinned))
    }
}
