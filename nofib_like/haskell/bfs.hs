{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns, MonoLocalBinds #-}
-- bfs: level-synchronous breadth-first search from node 0 of a pseudo-random
-- graph with n nodes and out-degree d (the same fixed-seed 64-bit LCG as
-- the C++ program).  Each level's frontier is cut into chunks of at least
-- 4096 nodes (at most 64 chunks), one spark per chunk collecting the
-- unvisited neighbours of its nodes (reading the distance array through an
-- unsafeFreeze view); the main thread forces the chunks in order and merges
-- each one's candidates as soon as it has them, deduplicated by the
-- distance array.  Metrics: ms; seq_ms = best of 3 runs of a plain queue
-- BFS in ST; ratio = seq_ms / ms (the speed-up over it); sparks=na.
-- Check: the distance arrays are equal.
-- Haskell twin of nofib_like/bfs.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (forM, when)
import Control.Monad.ST (ST, runST)
import Control.Parallel (par)
import Data.Array.Base (unsafeAt, unsafeRead, unsafeWrite)
import Data.Array.IO (IOUArray)
import Data.Array.ST (STUArray, newArray, newArray_, runSTUArray)
import Data.Array.Unboxed (UArray)
import Data.Array.Unsafe (unsafeFreeze)
import Data.Bits (shiftR)
import Data.Int (Int32)
import Data.IORef
import Data.Word (Word32, Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

kMinChunk, kMaxChunks :: Int
kMinChunk = 4096   -- same constants in the C++ program
kMaxChunks = 64

type Graph = UArray Int Word32      -- node u's edges at [u*d, u*d+d)
type Dist = UArray Int Int32

graph :: Int -> Int -> Graph
graph n d = runSTUArray $ do
  a <- newArray_ (0, n * d - 1)
  let go !i !x
        | i >= n * d = return a
        | otherwise = do
            let x' = x * 6364136223846793005 + 1442695040888963407 :: Word64
            unsafeWrite a i (fromIntegral ((x' `shiftR` 32) `mod` fromIntegral n))
            go (i + 1) x'
  go 0 42

newWords :: Int -> ST s (STUArray s Int Word32)
newWords m = newArray_ (0, max 0 m - 1)

newDist :: Int -> ST s (STUArray s Int Int32)
newDist n = newArray (0, n - 1) (-1)

-- | A chunk's candidates: the first c entries of the array.
data Cand = Cand !Int !(UArray Int Word32)

-- | Unvisited neighbours of frontier[lo..hi).
candidates :: Int -> Graph -> Dist -> UArray Int Word32 -> Int -> Int -> Cand
candidates d adj dist frontier lo hi = runST $ do
  buf <- newWords ((hi - lo) * d)
  let go !i !k !c
        | i >= hi = return c
        | k >= d = go (i + 1) 0 c
        | otherwise = do
            let v = unsafeAt adj (fromIntegral (unsafeAt frontier i) * d + k)
            if unsafeAt dist (fromIntegral v) < 0
              then unsafeWrite buf c v >> go i (k + 1) (c + 1)
              else go i (k + 1) c
  c <- go lo 0 0
  Cand c <$> unsafeFreeze buf

parBfs :: Int -> Int -> Graph -> IO Dist
parBfs n d adj = do
  dist <- newArray (0, n - 1) (-1) :: IO (IOUArray Int Int32)
  unsafeWrite dist 0 0
  let level !l frontier !f
        | f == 0 = unsafeFreeze dist
        | otherwise = do
            -- The sparks read dist through this view while the merge writes
            -- it (as the C++ program's relaxed atomics): they may see an
            -- entry of this level already set, and skip a node the merge
            -- would reject anyway, so the result does not depend on timing.
            view <- unsafeFreeze dist
            next <- newArray_ (0, n - 1) :: IO (IOUArray Int Word32)
            let chunk = max kMinChunk ((f + kMaxChunks - 1) `div` kMaxChunks)
                cands = [candidates d adj view frontier lo (min f (lo + chunk))
                        | lo <- [0, chunk .. f - 1]]
                merge [] !m = return m
                merge (x : rest) !m = do
                  Cand c a <- evaluate x   -- merge chunk c while later chunks may still run
                  let go !j !m'
                        | j >= c = merge rest m'
                        | otherwise = do
                            let v = unsafeAt a j
                            dv <- unsafeRead dist (fromIntegral v)
                            if dv < 0
                              then do unsafeWrite dist (fromIntegral v) (fromIntegral l)
                                      unsafeWrite next m' v
                                      go (j + 1) (m' + 1)
                              else go (j + 1) m'
                  go 0 m
            _ <- evaluate (foldr par () cands)
            m <- merge cands 0
            next' <- unsafeFreeze next
            level (l + 1) next' m
  level (1 :: Int) (runSTUArray (newWords 1 >>= \q -> unsafeWrite q 0 0 >> return q)) 1

seqBfs :: Int -> Int -> Graph -> Dist
seqBfs n d adj = runSTUArray $ do
  dist <- newDist n
  queue <- newWords n
  unsafeWrite dist 0 0
  unsafeWrite queue 0 0
  let loop !q !tl
        | q >= tl = return dist
        | otherwise = do
            u <- fromIntegral <$> unsafeRead queue q
            du <- unsafeRead dist u
            let edges !k !t
                  | k >= d = loop (q + 1) t
                  | otherwise = do
                      let v = unsafeAt adj (u * d + k)
                      dv <- unsafeRead dist (fromIntegral v)
                      if dv < 0
                        then unsafeWrite dist (fromIntegral v) (du + 1)
                               >> unsafeWrite queue t v >> edges (k + 1) (t + 1)
                        else edges (k + 1) t
            edges 0 tl
  loop 0 1

-- | Time one evaluation to WHNF; returns (value, milliseconds).
timed :: IO a -> IO (a, Double)
timed act = do
  t0 <- getMonotonicTimeNSec
  !v <- act
  t1 <- getMonotonicTimeNSec
  return (v, fromIntegral (t1 - t0) / 1e6)

body :: Int -> Int -> IO (Double, Double, Bool)
body n d = do
  adj <- evaluate (graph n d)
  (got, ms) <- timed (parBfs n d adj)
  -- n is read from an IORef at each use so GHC cannot share one sequential
  -- BFS between the timed runs.
  ref <- newIORef n
  seqs <- forM [1 :: Int .. 3] $ \_ -> readIORef ref >>= \n' -> timed (evaluate (seqBfs n' d adj))
  return (ms, minimum (map snd seqs), all ((== got) . fst) seqs)

main :: IO ()
main = do
  args <- getArgs
  let (n, d) = case args of
        (a : b : _) -> (read a, read b)
        [a]         -> (read a, 16)
        []          -> (1000000, 16)
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n d >>= putMVar r)   -- timed body runs in an unbound thread
  (ms, seqMs, ok) <- takeMVar r
  printf "capstan-bench name=bfs impl=ghc caps=%d n=%d ms=%.3f seq_ms=%.3f ratio=%.3f sparks=na check=%s\n"
    caps n ms seqMs (seqMs / ms) (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
