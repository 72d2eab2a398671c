-- Two-hop paths a -> b -> c in a follower graph (a free-connex full join).
CREATE TABLE follows(src INT, dst INT);

SELECT f1.src AS a, f1.dst AS b, f2.dst AS c
FROM follows f1 JOIN follows f2 ON f1.dst = f2.src;
