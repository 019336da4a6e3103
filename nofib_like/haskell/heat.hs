{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns, MonoLocalBinds #-}
-- heat: 2-D Jacobi heat diffusion on an n x n grid of 20-bit fixed-point
-- cells (the same fixed-seed LCG start as the C++ program, fixed edges) for
-- `steps` steps.  The grid is 16 strips of rows, each an unboxed array;
-- each step computes every new strip from the old ones with one spark per
-- strip and forces them all before the next step.  Persistent imbalance: a
-- cell in the middle third of the rows is relaxed 4 times against its old
-- neighbours (x = (4x + up + down + left + right) / 8, repeated), elsewhere
-- once.  Metrics: ms; sparks=na.  Check: the final grid equals a sequential
-- (one-strip) run, computed outside the timed region.
-- Haskell twin of nofib_like/heat.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (forM_, when)
import Control.Parallel (par, pseq)
import Data.Array (Array, listArray, elems, (!))
import Data.Array.Base (unsafeAt, unsafeWrite)
import Data.Array.ST (newArray_, runSTUArray)
import Data.Array.Unboxed (UArray)
import qualified Data.Array.Unboxed as U
import Data.Bits (shiftR, (.&.))
import Data.Word (Word32, Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

kStrips :: Int
kStrips = 16   -- same constant in the C++ program

-- | A grid: strips s = 0 .. k-1 of rows [s*n/k, (s+1)*n/k), row-major.
type Grid = Array Int (UArray Int Word32)

-- | The rows of one strip, from the old grid (rows 0 and n-1 and columns
-- 0 and n-1 stay).
relaxStrip :: Int -> Int -> Grid -> Int -> UArray Int Word32
relaxStrip n k old s = runSTUArray $ do
  let lo = s * n `div` k
      hi = (s + 1) * n `div` k
      -- The strip holding row i, and the row's offset in it.
      stripOf !i !t
        | i < t * n `div` k         = stripOf i (t - 1)
        | i >= (t + 1) * n `div` k  = stripOf i (t + 1)
        | otherwise                 = t
      strip i = old ! stripOf i ((i * k) `div` n)
      offset i = (i - stripOf i ((i * k) `div` n) * n `div` k) * n
      -- x relaxed against its old neighbours' sum sm: 4 times if heavy, else once
      relax :: Bool -> Word32 -> Word32 -> Word32
      relax heavy !x !sm = if heavy then r (r (r (r x))) else r x
        where r y = (4 * y + sm) `shiftR` 3
  out <- newArray_ (0, (hi - lo) * n - 1)
  let rows !i
        | i >= hi = return out
        | otherwise = do
            let !ma = strip i
                !mo = offset i
                !o = (i - lo) * n
                copy !j = when (j < n) $
                  unsafeWrite out (o + j) (unsafeAt ma (mo + j)) >> copy (j + 1)
            if i == 0 || i == n - 1 then copy 0 else do
              let !ua = strip (i - 1)
                  !uo = offset (i - 1)
                  !da = strip (i + 1)
                  !d0 = offset (i + 1)
                  !heavy = 3 * i >= n && 3 * i < 2 * n   -- 4 relaxations, else 1
                  cols !j
                    | j >= n - 1 = return ()
                    | otherwise = do
                        let sm = unsafeAt ua (uo + j) + unsafeAt da (d0 + j)
                               + unsafeAt ma (mo + j - 1) + unsafeAt ma (mo + j + 1)
                        unsafeWrite out (o + j) (relax heavy (unsafeAt ma (mo + j)) sm)
                        cols (j + 1)
              unsafeWrite out o (unsafeAt ma mo)
              unsafeWrite out (o + n - 1) (unsafeAt ma (mo + n - 1))
              cols 1
            rows (i + 1)
  rows lo

-- | steps Jacobi steps with k strips, one spark per strip if parallel.
run :: Bool -> Int -> Int -> Int -> Grid -> Grid
run parallel n k = go
  where
    go 0 g = g
    go t g =
      let strips = map (relaxStrip n k g) [0 .. k - 1]
          forced = if parallel then foldr par () strips `pseq` foldr pseq () strips
                               else foldr pseq () strips
      in forced `pseq` go (t - 1) (listArray (0, k - 1) strips)

initial :: Int -> Int -> Grid
initial n k = listArray (0, k - 1) [strip s | s <- [0 .. k - 1]]
  where
    cells = U.listArray (0, n * n - 1)
      [fromIntegral ((x `shiftR` 40) .&. 0xFFFFF) | x <- tail (iterate step 42)] :: UArray Int Word32
    step x = x * 6364136223846793005 + 1442695040888963407 :: Word64
    strip s = let lo = s * n `div` k; hi = (s + 1) * n `div` k
              in U.listArray (0, (hi - lo) * n - 1) [cells `unsafeAt` i | i <- [lo * n .. hi * n - 1]]

flatten :: Grid -> [Word32]
flatten = concatMap U.elems . elems

body :: Int -> Int -> IO (Double, Bool)
body n steps = do
  g0 <- evaluate (initial n kStrips)
  forM_ (elems g0) evaluate
  t0 <- getMonotonicTimeNSec
  got <- evaluate (run True n kStrips steps g0)
  t1 <- getMonotonicTimeNSec
  want <- evaluate (run False n 1 steps (initial n 1))
  return (fromIntegral (t1 - t0) / 1e6, flatten got == flatten want)

main :: IO ()
main = do
  args <- getArgs
  let (n, steps) = case args of
        (a : b : _) -> (read a, read b)
        [a]         -> (read a, 400)
        []          -> (512, 400)
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n steps >>= putMVar r)   -- timed body runs in an unbound thread
  (ms, ok) <- takeMVar r
  printf "capstan-bench name=heat impl=ghc caps=%d n=%d ms=%.3f sparks=na check=%s\n"
    caps n ms (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
