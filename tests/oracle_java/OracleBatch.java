import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.Arrays;

/**
 * Test-suite launcher (kstore's own code, run with `java OracleBatch.java`): runs many invocations of
 * the kafka-oracle harnesses in one JVM, so the suite pays the JVM start once per batch, not per input.
 *
 * Each stdin line is tab-separated: MAIN_CLASS, STDIN_FILE (or empty), ARG... The harnesses end with
 * System.exit, which is trapped and reported: after each run one line {"type":"oracle_batch_end","rc":N}, on
 * stdout and on stderr (an exception that escapes a harness: its stack trace on stderr, rc 99).
 */
public class OracleBatch {
    static final class ExitTrap extends SecurityException {
        final int status;
        ExitTrap(int status) { this.status = status; }
    }

    /**
     * The harnesses collect Kafka's log messages in one static queue (kafka.oracle.LoadLog.captured) made for
     * one run per JVM, and derive a run's summary (truncations, deleted_segments, recovery_ran) from it: empty
     * it before every run, or each run would report every earlier run's messages as its own.
     */
    static void resetCapturedLogMessages() {
        try {
            Object queue = Class.forName("kafka.oracle.LoadLog").getMethod("captured").invoke(null);
            ((java.util.Collection<?>) queue).clear();
        } catch (ReflectiveOperationException | LinkageError e) {
            // a build of the oracle without the capture: nothing to reset
        }
    }

    public static void main(String[] argv) throws Exception {
        System.setSecurityManager(new SecurityManager() {
            @Override public void checkPermission(Permission p) {}
            @Override public void checkPermission(Permission p, Object context) {}
            @Override public void checkExit(int status) { throw new ExitTrap(status); }
        });
        // what the JVM and the source launcher printed so far is nobody's run: mark where the runs start
        System.err.println("{\"type\":\"oracle_batch_start\"}");
        System.err.flush();
        InputStream realIn = System.in;
        BufferedReader in = new BufferedReader(new InputStreamReader(realIn, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String[] parts = line.split("\t", -1);
            String[] args = Arrays.copyOfRange(parts, 2, parts.length);
            int rc = 0;
            resetCapturedLogMessages();
            try (InputStream runIn = parts[1].isEmpty() ? InputStream.nullInputStream() : new FileInputStream(parts[1])) {
                System.setIn(runIn);
                Method main = Class.forName(parts[0]).getMethod("main", String[].class);
                main.invoke(null, (Object) args);
            } catch (InvocationTargetException e) {
                Throwable t = e.getCause();
                while (t != null && !(t instanceof ExitTrap)) t = t.getCause();
                if (t != null) {
                    rc = ((ExitTrap) t).status;
                } else {
                    e.getCause().printStackTrace();
                    rc = 99;
                }
            } finally {
                System.setIn(realIn);
            }
            scala.Console.out().flush();
            scala.Console.err().flush();
            System.out.flush();
            System.out.println("{\"type\":\"oracle_batch_end\",\"rc\":" + rc + "}");
            System.out.flush();
            // the same marker on stderr, so each run's stderr can be told apart too
            System.err.flush();
            System.err.println("{\"type\":\"oracle_batch_end\",\"rc\":" + rc + "}");
            System.err.flush();
        }
    }
}
