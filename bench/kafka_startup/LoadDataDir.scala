// bench/kafka_startup: a whole data dir loaded as a broker's LogManager.loadLogs loads it at startup, timed
// inside the JVM. Kafka's own anchor for bench/scale.py (kstore doctor/verify-index/inspect on the same dir).
//
// Usage: LoadDataDir DATA_DIR [--threads N] [--clean|--unclean]
//
// What LogManager.loadLogs does, with Kafka's own classes (kafka.log.UnifiedLog.apply -> LogLoader): the dir's
// recovery-point-offset-checkpoint and log-start-offset-checkpoint are read, every partition directory is
// handed to a fixed pool of num.recovery.threads.per.data.dir threads (--threads, default the cores), each
// opens its log with lastShutdownClean = whether a .kafka_cleanshutdown marker is present (or --clean/--unclean),
// recovery point from the checkpoint (0 after an unclean shutdown for a partition not listed). Prints one JSON
// line: partitions, segments, threads, clean, load_ms (first task submitted to the last load done), failures.
// Each log's file handles are released once it is loaded (closeHandlers, no write), as the nofile limit of a
// test machine is lower than a broker's.
// The directory is modified as a broker's startup modifies it: run it on a copy.
package kstore.bench

import java.io.File
import java.util.Properties
import java.util.concurrent.{ConcurrentHashMap, Executors, TimeUnit}
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import kafka.log.UnifiedLog
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.utils.Time
import org.apache.kafka.server.util.KafkaScheduler
import org.apache.kafka.storage.internals.checkpoint.OffsetCheckpointFile
import org.apache.kafka.storage.internals.log.{LogConfig, LogDirFailureChannel, LogOffsetsListener, ProducerStateManagerConfig}
import org.apache.kafka.storage.log.metrics.BrokerTopicStats

import scala.jdk.CollectionConverters._

object LoadDataDir {
  private def checkpoint(dir: File, name: String): Map[TopicPartition, Long] = {
    val f = new File(dir, name)
    if (!f.exists()) Map.empty
    else new OffsetCheckpointFile(f, null).read().asScala.map { case (tp, o) => tp -> o.longValue }.toMap
  }

  def main(args: Array[String]): Unit = {
    val dataDir = new File(args(0))
    var threads = Runtime.getRuntime.availableProcessors
    var clean: Option[Boolean] = None
    var i = 1
    while (i < args.length) {
      args(i) match {
        case "--threads" => threads = args(i + 1).toInt; i += 1
        case "--clean" => clean = Some(true)
        case "--unclean" => clean = Some(false)
        case other => System.err.println(s"LoadDataDir: unknown argument $other"); sys.exit(2)
      }
      i += 1
    }
    val lastShutdownClean = clean.getOrElse(new File(dataDir, ".kafka_cleanshutdown").exists())
    val recoveryPoints = checkpoint(dataDir, "recovery-point-offset-checkpoint")
    val logStartOffsets = checkpoint(dataDir, "log-start-offset-checkpoint")
    val partitionDirs = dataDir.listFiles().filter(d => d.isDirectory && !d.getName.startsWith(".") &&
      d.getName.lastIndexOf('-') > 0 && d.getName != "remote-log-index-cache").sortBy(_.getName)

    val config = new LogConfig(new Properties())
    val scheduler = new KafkaScheduler(1, true, "bench-scheduler-")
    scheduler.startup()
    val stats = new BrokerTopicStats()
    val failureChannel = new LogDirFailureChannel(10)
    val remaining = new ConcurrentHashMap[String, Integer]
    val pool = Executors.newFixedThreadPool(threads)
    val segments = new AtomicLong()
    val failures = new AtomicInteger()
    val t0 = System.nanoTime()
    for (dir <- partitionDirs) {
      pool.submit(new Runnable {
        def run(): Unit = try {
          val tp = UnifiedLog.parseTopicPartitionName(dir)
          val log = UnifiedLog(dir = dir, config = config,
            logStartOffset = logStartOffsets.getOrElse(tp, 0L),
            recoveryPoint = recoveryPoints.getOrElse(tp, 0L),
            scheduler = scheduler, brokerTopicStats = stats, time = Time.SYSTEM,
            maxTransactionTimeoutMs = 900000,
            producerStateManagerConfig = new ProducerStateManagerConfig(86400000, false),
            producerIdExpirationCheckIntervalMs = 600000,
            logDirFailureChannel = failureChannel, lastShutdownClean = lastShutdownClean,
            topicId = None, keepPartitionMetadataFile = true, numRemainingSegments = remaining,
            remoteStorageSystemEnable = false, logOffsetsListener = LogOffsetsListener.NO_OP_OFFSETS_LISTENER)
          segments.addAndGet(log.numberOfSegments)
          // A broker keeps every segment's channel open (it runs with a raised nofile limit); this harness
          // releases them without writing anything (UnifiedLog.closeHandlers, as for a failed log dir), so
          // that 10,000 partitions x 3 segments fit the machine's nofile limit.
          log.closeHandlers()
        } catch {
          case e: Throwable =>
            if (failures.incrementAndGet() <= 3) System.err.println(s"LoadDataDir: ${dir.getName}: $e")
        }
      })
    }
    pool.shutdown()
    pool.awaitTermination(1, TimeUnit.DAYS)
    val loadMs = (System.nanoTime() - t0) / 1e6
    println(s"""{"type":"load_summary","partitions":${partitionDirs.length},"segments":${segments.get},""" +
      s""""threads":$threads,"clean":$lastShutdownClean,"load_ms":$loadMs,"failures":${failures.get}}""")
    scheduler.shutdown()
    System.out.flush()
  }
}
