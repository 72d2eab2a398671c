-- Who reaches whom in two hops, the middle account projected away:
-- Q(A,C) = follows(A,B), follows(B,C), hierarchical but not q-hierarchical (the paper's
-- Example 4). `ivmflow run examples/reach.sql --eps E` keeps it with view trees.
CREATE TABLE follows(src INT, dst INT);

SELECT DISTINCT f1.src AS a, f2.dst AS c
FROM follows f1 JOIN follows f2 ON f1.dst = f2.src;
