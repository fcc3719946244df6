import Projector
import Testing

/// `--partitions`: what an operator may write, and what each names.
@Test func partitionSelectionsParseAsAnOperatorWritesThem() {
    #expect(PartitionSelection.parse("all") == .all)
    #expect(PartitionSelection.parse("0-3") == .only([0, 1, 2, 3]))
    #expect(PartitionSelection.parse("5-7,1,6") == .only([1, 5, 6, 7]))
    #expect(PartitionSelection.parse("2") == .only([2]))
    for bad in ["", "3-1", "a", "-1", "1,,2", "1-2-3", "0-", "ALL"] {
        #expect(PartitionSelection.parse(bad) == nil, "'\(bad)' is refused")
    }
    #expect(PartitionSelection.all.partitions(of: 4) == [0, 1, 2, 3])
    #expect(
        PartitionSelection.only([1, 5]).partitions(of: 4) == [1],
        "a partition the log does not have is left out")
}
